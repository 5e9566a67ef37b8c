/**
 * ANSI SGR escape codes (colours, bold, italic, underline) to styled text segments.
 *
 * Only what training output uses: 16 standard colours become CSS classes (themed in
 * base.css for light and dark), 256-colour and true-colour codes become inline colours.
 * Every other escape sequence (cursor moves, OSC titles) is dropped.
 */

export interface IAnsiStyle {
  fg?: string; // 'ansi-<n>' class suffix (0-15) or a CSS colour
  bg?: string;
  bold?: boolean;
  italic?: boolean;
  underline?: boolean;
}

export interface IAnsiSegment {
  text: string;
  style: IAnsiStyle;
}

// CSI ... final byte, or OSC ... BEL/ST
const ESCAPE =
  // eslint-disable-next-line no-control-regex -- terminal escape sequences start with ESC (0x1b)
  /\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][A-Za-z0-9]|\x1b[=>]/g;

/** Remove every escape sequence. */
export function stripAnsi(text: string): string {
  return text.indexOf('\x1b') < 0 ? text : text.replace(ESCAPE, '');
}

function cube(n: number): string {
  // xterm 256-colour palette: 16-231 is a 6x6x6 cube, 232-255 a grey ramp
  if (n >= 232) {
    const v = 8 + (n - 232) * 10;
    return `rgb(${v},${v},${v})`;
  }
  const i = n - 16;
  const level = (x: number) => (x === 0 ? 0 : 55 + x * 40);
  return `rgb(${level(Math.floor(i / 36))},${level(Math.floor(i / 6) % 6)},${level(i % 6)})`;
}

function extended(codes: number[], i: number): [string | undefined, number] {
  // 38;5;n or 38;2;r;g;b (same for 48); returns the colour and how many codes it used
  if (codes[i + 1] === 5 && codes.length > i + 2) {
    const n = codes[i + 2];
    return [n < 16 ? `ansi-${n}` : cube(n), 2];
  }
  if (codes[i + 1] === 2 && codes.length > i + 4) {
    const [r, g, b] = codes.slice(i + 2, i + 5);
    return [`rgb(${r},${g},${b})`, 4];
  }
  return [undefined, codes.length - i - 1];
}

/** Apply one SGR parameter list to a style; returns the new style. */
export function applySgr(style: IAnsiStyle, params: string): IAnsiStyle {
  const codes = params === '' ? [0] : params.split(';').map(c => (c === '' ? 0 : Number(c)));
  let s: IAnsiStyle = { ...style };
  for (let i = 0; i < codes.length; i++) {
    const c = codes[i];
    if (c === 0) {
      s = {};
    } else if (c === 1) {
      s.bold = true;
    } else if (c === 3) {
      s.italic = true;
    } else if (c === 4) {
      s.underline = true;
    } else if (c === 22) {
      s.bold = false;
    } else if (c === 23) {
      s.italic = false;
    } else if (c === 24) {
      s.underline = false;
    } else if (c >= 30 && c <= 37) {
      s.fg = `ansi-${c - 30}`;
    } else if (c >= 90 && c <= 97) {
      s.fg = `ansi-${c - 90 + 8}`;
    } else if (c >= 40 && c <= 47) {
      s.bg = `ansi-${c - 40}`;
    } else if (c >= 100 && c <= 107) {
      s.bg = `ansi-${c - 100 + 8}`;
    } else if (c === 39) {
      delete s.fg;
    } else if (c === 49) {
      delete s.bg;
    } else if (c === 38 || c === 48) {
      const [colour, used] = extended(codes, i);
      if (colour) {
        s[c === 38 ? 'fg' : 'bg'] = colour;
      }
      i += used;
    }
  }
  return s;
}

/** Split `text` into segments of one style each, starting from `initial`. */
export function parseAnsi(text: string, initial: IAnsiStyle = {}): IAnsiSegment[] {
  if (text.indexOf('\x1b') < 0) {
    return text ? [{ text, style: initial }] : [];
  }
  const out: IAnsiSegment[] = [];
  let style = initial;
  let last = 0;
  ESCAPE.lastIndex = 0;
  let m: RegExpExecArray | null;
  while ((m = ESCAPE.exec(text)) !== null) {
    if (m.index > last) {
      out.push({ text: text.slice(last, m.index), style });
    }
    if (m[2] === 'm') {
      style = applySgr(style, m[1] ?? '');
    }
    last = ESCAPE.lastIndex;
  }
  if (last < text.length) {
    out.push({ text: text.slice(last), style });
  }
  return out;
}

/** Render segments into `parent` as text nodes and spans (never as HTML). */
export function renderAnsi(parent: HTMLElement, segments: IAnsiSegment[]): void {
  for (const seg of segments) {
    const { fg, bg, bold, italic, underline } = seg.style;
    if (!fg && !bg && !bold && !italic && !underline) {
      parent.appendChild(document.createTextNode(seg.text));
      continue;
    }
    const span = document.createElement('span');
    span.textContent = seg.text;
    for (const [colour, kind] of [
      [fg, 'fg'],
      [bg, 'bg']
    ] as const) {
      if (!colour) {
        continue;
      }
      if (colour.startsWith('ansi-')) {
        span.classList.add(`jp-DistTrain-${colour}-${kind}`);
      } else if (kind === 'fg') {
        span.style.color = colour;
      } else {
        span.style.backgroundColor = colour;
      }
    }
    if (bold) {
      span.classList.add('jp-DistTrain-ansi-bold');
    }
    if (italic) {
      span.style.fontStyle = 'italic';
    }
    if (underline) {
      span.style.textDecoration = 'underline';
    }
    parent.appendChild(span);
  }
}
