import { applySgr, parseAnsi, stripAnsi } from '../render/ansi';

describe('parseAnsi', () => {
  it('returns plain text as one unstyled segment', () => {
    expect(parseAnsi('hello')).toEqual([{ text: 'hello', style: {} }]);
    expect(parseAnsi('')).toEqual([]);
  });

  it('splits on SGR codes: colours, bright colours, bold, reset', () => {
    const segs = parseAnsi('a\x1b[1;31mred\x1b[0m b \x1b[92mgreen\x1b[39mplain');
    expect(segs).toEqual([
      { text: 'a', style: {} },
      { text: 'red', style: { bold: true, fg: 'ansi-1' } },
      { text: ' b ', style: {} },
      { text: 'green', style: { fg: 'ansi-10' } },
      { text: 'plain', style: {} }
    ]);
  });

  it('understands 256-colour and true-colour codes and backgrounds', () => {
    expect(parseAnsi('\x1b[38;5;196mx')[0].style.fg).toBe('rgb(255,0,0)');
    expect(parseAnsi('\x1b[38;5;3mx')[0].style.fg).toBe('ansi-3');
    expect(parseAnsi('\x1b[38;5;232mx')[0].style.fg).toBe('rgb(8,8,8)');
    expect(parseAnsi('\x1b[48;2;1;2;3mx')[0].style.bg).toBe('rgb(1,2,3)');
    expect(parseAnsi('\x1b[44mx\x1b[49my').map(s => s.style.bg)).toEqual(['ansi-4', undefined]);
  });

  it('drops non-colour escapes (cursor moves, titles)', () => {
    expect(parseAnsi('\x1b[2K\x1b[1Gdone\x1b]0;title\x07!')).toEqual([
      { text: 'done', style: {} },
      { text: '!', style: {} }
    ]);
    expect(stripAnsi('\x1b[32mok\x1b[0m \x1b[A')).toBe('ok ');
  });

  it('treats an empty parameter list as reset', () => {
    expect(applySgr({ fg: 'ansi-1', bold: true }, '')).toEqual({});
    expect(applySgr({ bold: true, underline: true }, '22;24')).toEqual({
      bold: false,
      underline: false
    });
  });
});
