// A list that renders only the rows in view (fixed row height), so a run of 100,000 events
// scrolls as smoothly as one of ten: the DOM holds about a screenful of rows at any time.
import type { ComponentChildren } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";

const OVERSCAN = 10;

export function VirtualList<T>(props: {
  items: T[];
  /** How many of `items` to show (an array that grows in place passes its length here, so a render sees it). */
  count?: number;
  rowHeight: number;
  height: number;
  label: string;
  row: (item: T, index: number) => ComponentChildren;
  /** Keep the view at the bottom while it is there (a live tail). */
  follow?: boolean;
}) {
  const box = useRef<HTMLElement>(null);
  const [top, setTop] = useState(0);
  const atBottom = useRef(true);
  const { items, rowHeight, height } = props;
  const length = props.count ?? items.length;
  useEffect(() => {
    const el = box.current;
    if (el && props.follow && atBottom.current) el.scrollTop = el.scrollHeight;
  }, [length, props.follow]);
  const first = Math.max(0, Math.floor(top / rowHeight) - OVERSCAN);
  const last = Math.min(length, Math.ceil((top + height) / rowHeight) + OVERSCAN);
  const rows: ComponentChildren[] = [];
  for (let i = first; i < last; i++) {
    rows.push(
      <li key={i} class="vrow" style={{ top: `${i * rowHeight}px`, height: `${rowHeight}px` }}>
        {props.row(items[i] as T, i)}
      </li>,
    );
  }
  return (
    <section
      ref={box}
      class="vlist"
      style={{ height: `${height}px` }}
      // A scrolled region is reachable by keyboard (axe: scrollable-region-focusable).
      // biome-ignore lint/a11y/noNoninteractiveTabindex: so it takes a tab stop
      tabIndex={0}
      aria-label={props.label}
      data-testid="vlist"
      onScroll={(e) => {
        const el = e.currentTarget as HTMLElement;
        atBottom.current = el.scrollTop + el.clientHeight >= el.scrollHeight - rowHeight;
        setTop(el.scrollTop);
      }}
    >
      <ul class="vlist-rows" style={{ height: `${length * rowHeight}px` }}>
        {rows}
      </ul>
    </section>
  );
}
