/** Small DOM builders the views share: an element, a heading, a key/value list, a table, a phase badge. */

/** A `tag` element of `className`, holding `text` if given. */
export function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  e.className = className;
  if (text !== undefined) {
    e.textContent = text;
  }
  return e;
}

export function section(text: string): HTMLElement {
  const h = document.createElement('h3');
  h.className = 'jp-DistTrainDetails-section';
  h.textContent = text;
  return h;
}

export function keyValues(rows: [string, string][], className = ''): HTMLElement {
  const dl = document.createElement('dl');
  dl.className = `jp-DistTrainDetails-spec ${className}`.trim();
  for (const [k, v] of rows) {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.textContent = v;
    dl.append(dt, dd);
  }
  return dl;
}

/**
 * A table with a header row; each cell names its column (`data-column`), a stable handle for
 * tests and styles. Strings become text, elements are put in as they are.
 */
export function table(
  head: string[],
  rows: (string | HTMLElement)[][],
  className = ''
): HTMLElement {
  const t = document.createElement('table');
  t.className = `jp-DistTrainDetails-table ${className}`.trim();
  const tr = document.createElement('tr');
  for (const h of head) {
    const th = document.createElement('th');
    th.scope = 'col';
    th.textContent = h;
    tr.append(th);
  }
  const thead = document.createElement('thead');
  thead.append(tr);
  const tbody = document.createElement('tbody');
  for (const row of rows) {
    const r = document.createElement('tr');
    for (const [i, cell] of row.entries()) {
      const td = document.createElement('td');
      td.dataset.column = head[i];
      if (typeof cell === 'string') {
        td.textContent = cell;
      } else {
        td.append(cell);
      }
      r.append(td);
    }
    tbody.append(r);
  }
  t.append(thead, tbody);
  return t;
}

/** Name each body row of `table` by `data-<attribute>` (e.g. its replica), in order. */
export function nameRows(t: HTMLElement, attribute: string, names: string[]): void {
  t.querySelectorAll('tbody tr').forEach((tr, i) => {
    (tr as HTMLElement).dataset[attribute] = names[i];
  });
}

/** A coloured phase badge (colours from the theme, see base.css). */
export function phaseBadge(phase: string): HTMLSpanElement {
  const badge = document.createElement('span');
  badge.className = `jp-DistTrain-badge jp-DistTrain-phase-${phase.toLowerCase()}`;
  badge.textContent = phase;
  return badge;
}
