// Charts of a result drawn client side as SVG, from a data view's `render` config (the
// console's convention, docs/api-decisions.md "Console"): {chart: "line" | "bar" | "table",
// x: column, y: column or [columns]}. Without a config, or naming columns the result lacks,
// the result is a table.
export interface Result {
  columns: { name: string; type: string }[];
  rows: unknown[][];
}

export interface RenderConfig {
  chart?: string;
  x?: string;
  y?: string | string[];
}

const W = 640;
const H = 240;
const PAD = 36;
const COLORS = ["#1f6feb", "#d9480f", "#2b8a3e", "#862e9c", "#c92a2a"];

export function ResultTable(props: { result: Result; label: string }) {
  const { result } = props;
  return (
    <div class="scroll">
      <table data-testid="result-table">
        <caption class="sr-only">{props.label}</caption>
        <thead>
          <tr>
            {result.columns.map((c) => (
              <th scope="col" key={c.name}>
                {c.name} <small>{c.type}</small>
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {result.rows.map((row, i) => (
            <tr key={i}>
              {row.map((cell, j) => (
                <td key={j}>
                  {cell === null ? "null" : typeof cell === "object" ? JSON.stringify(cell) : String(cell)}
                </td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

export function Chart(props: { result: Result; render: RenderConfig | undefined; title: string }) {
  const { result, render } = props;
  const kind = render?.chart;
  const names = result.columns.map((c) => c.name);
  const xi = render?.x ? names.indexOf(render.x) : -1;
  const ys = (Array.isArray(render?.y) ? render.y : render?.y ? [render.y] : []).map((y) => names.indexOf(y));
  if ((kind !== "line" && kind !== "bar") || xi < 0 || ys.length === 0 || ys.some((y) => y < 0)) {
    return <ResultTable result={result} label={props.title} />;
  }
  const values = result.rows.flatMap((row) => ys.map((y) => Number(row[y])).filter(Number.isFinite));
  const max = Math.max(0, ...values);
  const min = Math.min(0, ...values);
  const span = max - min || 1;
  const n = result.rows.length;
  const xAt = (i: number) => PAD + (n <= 1 ? (W - 2 * PAD) / 2 : (i * (W - 2 * PAD)) / (n - 1));
  const yAt = (v: number) => H - PAD - ((v - min) / span) * (H - 2 * PAD);
  const barW = Math.max(2, (W - 2 * PAD) / Math.max(1, n) / (ys.length + 1));
  return (
    <figure>
      <svg
        viewBox={`0 0 ${W} ${H}`}
        role="img"
        aria-label={`${kind} chart of ${props.title}: ${names[ys[0] as number]} by ${names[xi]}`}
        data-testid={`chart-${kind}`}
        class="chart"
      >
        <line x1={PAD} y1={yAt(0)} x2={W - PAD} y2={yAt(0)} class="axis" />
        <line x1={PAD} y1={PAD} x2={PAD} y2={H - PAD} class="axis" />
        <text x={4} y={PAD}>
          {max}
        </text>
        <text x={4} y={H - PAD}>
          {min}
        </text>
        {ys.map((y, s) =>
          kind === "line" ? (
            <polyline
              key={y}
              fill="none"
              stroke={COLORS[s % COLORS.length]}
              stroke-width="2"
              points={result.rows.map((row, i) => `${xAt(i)},${yAt(Number(row[y]) || 0)}`).join(" ")}
            />
          ) : (
            result.rows.map((row, i) => {
              const v = Number(row[y]) || 0;
              const x = PAD + (i * (W - 2 * PAD)) / Math.max(1, n) + s * barW;
              return (
                <rect
                  key={`${y}-${i}`}
                  x={x}
                  y={Math.min(yAt(v), yAt(0))}
                  width={barW}
                  height={Math.abs(yAt(v) - yAt(0))}
                  fill={COLORS[s % COLORS.length]}
                />
              );
            })
          ),
        )}
        {result.rows.map((row, i) =>
          n <= 12 || i % Math.ceil(n / 12) === 0 ? (
            <text key={i} x={xAt(i)} y={H - 8} text-anchor="middle" class="tick">
              {String(row[xi]).slice(0, 12)}
            </text>
          ) : null,
        )}
      </svg>
      <figcaption>
        {ys.map((y, s) => (
          <span key={y} class="legend" style={{ color: COLORS[s % COLORS.length] }}>
            ■ {names[y]}{" "}
          </span>
        ))}
      </figcaption>
    </figure>
  );
}
