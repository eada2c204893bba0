// node:path and node:os for the SDK's volume push, which the console never calls.
const path = {
  join: (...parts: string[]) => parts.join("/"),
  resolve: (...parts: string[]) => parts.join("/"),
  relative: (_from: string, to: string) => to,
  dirname: (p: string) => p.replace(/\/[^/]*$/, ""),
  basename: (p: string) => p.replace(/^.*\//, ""),
  sep: "/",
  homedir: () => "/",
  tmpdir: () => "/tmp",
};
export default path;
