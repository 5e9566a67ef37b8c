import { displayText, FilteredView, linePrefix, LogBuffer, rawText } from '../models/logbuffer';
import type { ILogLine } from '../rest/types';

let off = 0;
function line(text: string, rank: number | null = 0, replica = `rank${rank}`): ILogLine {
  off += text.length;
  return { text, replica, rank, offset: `${replica}:${off}` };
}

describe('displayText', () => {
  it('drops line endings and keeps the last redraw of a progress bar', () => {
    expect(displayText('plain\n')).toBe('plain');
    expect(displayText(' 10%|#         |\r')).toBe(' 10%|#         |');
    expect(displayText('10%\r20%\r30%\r')).toBe('30%');
    expect(displayText('10%\r20%\rdone\n')).toBe('done');
    expect(displayText('')).toBe('');
  });
});

describe('LogBuffer', () => {
  it('prefixes ranks and named replicas when replicas are interleaved', () => {
    const b = new LogBuffer(true);
    b.append([line('hello', 0), line('world', 1), line('pod up', null, 'worker-1')]);
    expect([b.line(0), b.line(1), b.line(2)]).toEqual([
      '[rank0] hello',
      '[rank1] world',
      '[worker-1] pod up'
    ]);
    expect(linePrefix(line('x', 3))).toBe('[rank3] ');
  });

  it('shows a tqdm bar redrawn 10,000 times as one updating line per replica', () => {
    const b = new LogBuffer(true);
    b.append([line('start', 0)]);
    for (let i = 1; i <= 10000; i++) {
      b.append([line(`${i}/10000\r`, 0), line(`${i}/10000\r`, 1)]);
    }
    expect(b.length).toBe(3);
    expect([b.line(1), b.line(2)]).toEqual(['[rank0] 10000/10000', '[rank1] 10000/10000']);
    // the bar's final line (ends with \n) replaces the bar for good; later lines append
    const first = b.append([line('10000/10000 done\n', 0), line('epoch 1', 0)]);
    expect(first).toBe(1);
    expect(b.length).toBe(4);
    expect(b.line(1)).toBe('[rank0] 10000/10000 done');
    expect(b.line(3)).toBe('[rank0] epoch 1');
    expect(b.line(2)).toBe('[rank1] 10000/10000'); // rank1's bar still pending
    b.append([line('after', 1)]);
    expect(b.line(2)).toBe('[rank1] after');
  });

  it('keeps a bar as drawn when the next chunk only ends its line', () => {
    const b = new LogBuffer(false);
    b.append([line('50%\r', 0), line('', 0), line('next', 0)]);
    expect([b.length, b.line(0), b.line(1)]).toEqual([2, '50%', 'next']);
  });

  it('tracks the resume token of the last chunk or the page', () => {
    const b = new LogBuffer(false);
    expect(b.offset).toBe('');
    b.append([{ text: 'a', replica: 'rank0', rank: 0, offset: '2' }]);
    expect(b.offset).toBe('2');
    b.append([], 'rank0:2,rank1:0');
    expect(b.offset).toBe('rank0:2,rank1:0');
    expect(b.line(0)).toBe('a');
  });

  it('holds a million lines and searches them', () => {
    const b = new LogBuffer(true);
    const page: ILogLine[] = [];
    for (let i = 0; i < 1_000_000; i++) {
      page.push({
        text: `step ${i} loss 0.${i % 97}`,
        replica: `rank${i % 2}`,
        rank: i % 2,
        offset: String(i)
      });
    }
    b.append(page);
    expect(b.length).toBe(1_000_000);
    expect(b.line(999_999)).toBe('[rank1] step 999999 loss 0.' + (999_999 % 97));
    expect(b.search('step 99999 ')).toEqual([99999]);
  });
});

describe('FilteredView', () => {
  it('filters case-insensitively, ignoring ANSI codes, and keeps up with new and rewritten lines', () => {
    const b = new LogBuffer(true);
    const v = new FilteredView(b, 'loss');
    b.append([line('\x1b[31mLoss\x1b[0m 1.0', 0), line('lr 0.1', 0), line('0%\r', 1)]);
    v.update(0);
    expect(v.length).toBe(1);
    expect(v.index(0)).toBe(0);
    const first = b.append([line('loss 0.5\n', 1), line('loss 0.4', 0)]);
    v.update(first);
    expect(Array.from({ length: v.length }, (_, r) => v.index(r))).toEqual([0, 2, 3]);
    v.setQuery('');
    expect(v.length).toBe(4);
    expect(v.index(3)).toBe(3);
  });
});

describe('rawText', () => {
  it('writes lines as the file holds them', () => {
    expect(rawText([line('a'), line('b\n'), line('50%\r'), line('c')])).toBe('a\nb\n50%\rc\n');
  });
});
