import { dispatchLogEvent, ILogStreamHandlers, runLines } from '../rest/logstream';
import { SseParser } from '../rest/sse';
import type { ILogLine } from '../rest/types';

/** What the server writes (jupyter_disttrain/server/handlers.py `_sse`). */
function sse(event: string, data: object, id?: string): string {
  return `${id ? `id: ${id}\n` : ''}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

function recorder() {
  const got: { lines: ILogLine[]; offsets: string[]; end: [string, string] | null } = {
    lines: [],
    offsets: [],
    end: null
  };
  const handlers: ILogStreamHandlers = {
    lines: (lines, offset) => {
      got.lines.push(...lines);
      got.offsets.push(offset);
    },
    end: (phase, offset) => {
      got.end = [phase, offset];
    }
  };
  return { got, handlers };
}

describe('log stream events', () => {
  const runs = [
    { replica: 'worker-0', rank: 0, lines: ['a\n', 'b\n'], offset: 'worker-0:4,worker-1:0' },
    { replica: 'worker-1', rank: 1, lines: ['c\n'], offset: 'worker-0:4,worker-1:2' }
  ];

  it('turns runs into lines, each with its run’s resume token', () => {
    expect(runLines(runs).map(l => [l.text, l.replica, l.rank, l.offset])).toEqual([
      ['a\n', 'worker-0', 0, 'worker-0:4,worker-1:0'],
      ['b\n', 'worker-0', 0, 'worker-0:4,worker-1:0'],
      ['c\n', 'worker-1', 1, 'worker-0:4,worker-1:2']
    ]);
  });

  it('hands lines and the end to the handlers, and says when the stream ended', () => {
    const { got, handlers } = recorder();
    const parser = new SseParser();
    const text =
      sse('lines', { runs, offset: runs[1].offset }, runs[1].offset) +
      ': keep-alive\n\n' +
      sse('end', { phase: 'Succeeded', offset: runs[1].offset }, runs[1].offset);
    const ended = parser.push(text).map(e => dispatchLogEvent(e, handlers));
    expect(ended).toEqual([false, true]);
    expect(got.lines.map(l => l.text)).toEqual(['a\n', 'b\n', 'c\n']);
    expect(got.offsets).toEqual([runs[1].offset]);
    expect(got.end).toEqual(['Succeeded', runs[1].offset]);
  });

  it('an end with no line yet keeps the empty token; an error event throws its message', () => {
    const { got, handlers } = recorder();
    const [end, error] = new SseParser().push(
      sse('end', { phase: 'Failed', offset: '' }) + sse('error', { message: 'gone', status: 404 })
    );
    expect(dispatchLogEvent(end, handlers)).toBe(true);
    expect(got.end).toEqual(['Failed', '']);
    expect(() => dispatchLogEvent(error, handlers)).toThrow('gone');
  });
});
