// `--name value` pairs of a benchmark's command line.
export function benchArgs(argv: string[] = process.argv): Map<string, string> {
  const args = new Map<string, string>();
  for (let i = 2; i < argv.length; i += 2) args.set(String(argv[i]).replace(/^--/, ""), String(argv[i + 1]));
  return args;
}
