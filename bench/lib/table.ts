/** A Markdown-style table, columns padded to their widest cell; the first row is the header. */
export function textTable(rows: string[][]): string {
  const widths = (rows[0] ?? []).map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length)));
  const fmt = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join(" | ")} |`;
  const [header, ...rest] = rows;
  return [fmt(header ?? []), fmt(widths.map((w) => "-".repeat(w))), ...rest.map(fmt)].join("\n");
}
