import { ALL, ILogFeedOptions, LogFeed, PAGE } from '../models/logfeed';
import type { ILogStreamHandlers } from '../rest/logstream';
import type { IJobDetail, ILogLine, ILogPage, ILogQuery } from '../rest/types';

interface IOpenStream {
  query: { replica?: string; offset?: string };
  handlers: ILogStreamHandlers;
  signal: AbortSignal;
  /** Where the next line for this stream starts (index in its replica's lines). */
  next: number;
  /** Cut or ended: it sends nothing more. */
  closed: boolean;
  settle: (ended: boolean | Error) => void;
}

/**
 * A job's log as the server holds it, answering like the REST API: pages by offset or tail
 * (`fetchLogs`), and an event stream that sends every line written after its offset
 * (`streamLogs`). Resume tokens are line counts (of one replica, or of all lines when the
 * replicas are interleaved); the feed treats them as opaque, as it must the server's.
 */
function logServer() {
  const lines: { text: string; replica: string; rank: number }[] = [];
  const state = {
    ended: null as string | null,
    queries: [] as ILogQuery[],
    streams: [] as IOpenStream[],
    /** Refuse to open streams (as a proxy that cannot pass them through would). */
    refuseStreams: false,
    refused: 0,
    jobCalls: 0
  };
  const of = (replica?: string) => lines.filter(l => !replica || l.replica === replica);
  const line = (l: (typeof lines)[number], i: number): ILogLine => ({
    text: `${l.text}\n`,
    replica: l.replica,
    rank: l.rank,
    offset: String(i + 1)
  });

  const fetchLogs = async (_id: string, query: ILogQuery): Promise<ILogPage> => {
    state.queries.push(query);
    const mine = of(query.replica);
    const from =
      query.tail !== undefined ? Math.max(0, mine.length - query.tail) : Number(query.offset || 0);
    const page = mine.slice(from, from + (query.limit ?? 1000)).map((l, i) => line(l, from + i));
    const next = from + page.length;
    const more = next < mine.length;
    return { lines: page, offset: String(next), more, done: !!state.ended && !more };
  };

  /** Send an open stream what it has not had yet; end it once the job has ended. */
  const feed = (s: IOpenStream) => {
    if (s.closed || s.signal.aborted) {
      return;
    }
    const mine = of(s.query.replica);
    if (s.next < mine.length) {
      const batch = mine.slice(s.next).map((l, i) => line(l, s.next + i));
      s.next = mine.length;
      s.handlers.lines(batch, String(s.next));
    }
    if (state.ended) {
      s.handlers.end(state.ended, String(s.next));
      s.settle(true);
    }
  };
  const open = () => state.streams.filter(s => !s.closed && !s.signal.aborted);

  const streamLogs = (
    _id: string,
    query: { replica?: string; offset?: string },
    handlers: ILogStreamHandlers,
    signal: AbortSignal
  ): Promise<boolean> => {
    if (state.refuseStreams) {
      state.refused++;
      return Promise.reject(new Error('expected an event stream, got text/html'));
    }
    return new Promise<boolean>((resolve, reject) => {
      const s: IOpenStream = {
        query,
        handlers,
        signal,
        next: Number(query.offset || 0),
        closed: false,
        settle: ended => {
          s.closed = true;
          return ended instanceof Error ? reject(ended) : resolve(ended);
        }
      };
      state.streams.push(s);
      signal.addEventListener('abort', () => reject(new DOMException('aborted', 'AbortError')));
      setTimeout(() => feed(s), 0); // the backlog after its offset, as the server's first read
    });
  };

  const fetchJob = async (id: string): Promise<IJobDetail> => {
    state.jobCalls++;
    const replicas = [...new Set(lines.map(l => l.replica))].map(name => ({ name }));
    return {
      id,
      summary: { name: 'demo' },
      status: { phase: state.ended ?? 'Running', replicas }
    } as unknown as IJobDetail;
  };

  return {
    state,
    fetchLogs,
    streamLogs,
    fetchJob,
    /** A rank writes lines; open streams of its replica get them at once. */
    write(rank: number, ...texts: string[]) {
      for (const text of texts) {
        lines.push({ text, replica: `rank-${rank}`, rank });
      }
      open().forEach(feed);
    },
    end(phase = 'Succeeded') {
      state.ended = phase;
      open().forEach(feed);
    },
    /** The open streams fail (a dropped connection) or close early (a proxy timeout). */
    cut(how: 'fail' | 'close') {
      open().forEach(s => s.settle(how === 'fail' ? new Error('network error') : false));
    }
  };
}

async function until(cond: () => boolean, what: string, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise(resolve => setTimeout(resolve, 2));
  }
}

const texts = (feed: LogFeed) =>
  Array.from({ length: feed.selection.buffer.length }, (_, i) => feed.selection.buffer.line(i));

/** A feed of the server's job, polling every 5 ms. */
function feedOf(server: ReturnType<typeof logServer>, options: Partial<ILogFeedOptions> = {}) {
  const { fetchLogs, streamLogs, fetchJob } = server;
  return new LogFeed({
    jobId: 'demo-abcde',
    interval: 5,
    fetchLogs,
    streamLogs,
    fetchJob,
    ...options
  });
}

describe('LogFeed', () => {
  it('loads the last lines, reads the backlog by offset, then follows the stream', async () => {
    const server = logServer();
    for (let i = 0; i < 50; i++) {
      server.write(i % 2, `line ${i}`);
    }
    const feed = feedOf(server, { tail: 10 });
    const appended: number[] = [];
    feed.changed.connect((_, change) => change.kind === 'lines' && appended.push(change.first));
    await feed.start();
    expect(server.state.queries[0]).toEqual({ replica: '', tail: 10, limit: 10 });
    expect(texts(feed)).toEqual(
      Array.from({ length: 10 }, (_, i) => `[rank${(40 + i) % 2}] line ${40 + i}`)
    );
    expect(feed.status).toEqual({ message: null, error: false });

    await until(() => server.state.streams.length === 1, 'the stream to open');
    expect(server.state.queries.slice(1)).toEqual([{ replica: '', offset: '50', limit: PAGE }]);
    expect(server.state.streams[0].query).toEqual({ replica: '', offset: '50' });
    const reads = server.state.queries.length;

    server.write(1, 'streamed 1', 'streamed 2');
    expect(texts(feed).slice(-2)).toEqual(['[rank1] streamed 1', '[rank1] streamed 2']);
    expect(appended).toEqual([0, 10]);
    server.end('Succeeded');
    await until(() => feed.selection.done, 'the end');
    expect(feed.job.endedPhase).toBe('Succeeded');
    expect(feed.selection.buffer.offset).toBe('52');
    await new Promise(resolve => setTimeout(resolve, 30));
    expect(server.state.queries.length).toBe(reads); // streamed: no offset polling
    feed.dispose();
  });

  it('pages through a whole log by offset, each line once, and does not follow an ended job', async () => {
    const server = logServer();
    const n = 2 * PAGE + 5;
    for (let i = 0; i < n; i++) {
      server.write(0, `l${i}`);
    }
    server.end('Failed');
    const feed = feedOf(server, { replica: 'rank-0', tail: ALL });
    await feed.start();
    expect(server.state.queries.map(q => q.offset)).toEqual(['', String(PAGE), String(2 * PAGE)]);
    expect(feed.selection.buffer.length).toBe(n);
    expect(feed.selection.buffer.line(0)).toBe('l0'); // one replica: no prefix
    expect(feed.selection.buffer.line(n - 1)).toBe(`l${n - 1}`);
    expect(feed.selection.done).toBe(true);
    expect(feed.poll.state.phase).not.toBe('started');
    expect(server.state.streams).toEqual([]);
    feed.dispose();
  });

  it.each([
    ['fails', 'fail'],
    ['closes early', 'close']
  ] as const)(
    'follows by offset polling when the stream %s, with no line lost or repeated',
    async (_, how) => {
      const warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
      const server = logServer();
      server.write(0, 'a');
      const feed = feedOf(server);
      await feed.start();
      await until(() => server.state.streams.length === 1, 'the stream to open');
      server.write(0, 'b', 'c'); // through the stream
      server.cut(how);
      server.write(0, 'd'); // no stream open: found by polling from after 'c'
      await until(() => feed.selection.buffer.length === 4, 'the line written after the cut');
      server.write(1, 'e');
      server.end('Succeeded');
      await until(() => feed.selection.done, 'the end, by polling');
      expect(texts(feed)).toEqual(
        ['a', 'b', 'c', 'd', 'e'].map((t, i) => `[rank${i < 4 ? 0 : 1}] ${t}`)
      );
      const polled = server.state.queries.filter(q => q.offset !== undefined).map(q => q.offset);
      expect(polled.slice(1)).toContain('3'); // resumed after the last streamed line
      expect(server.state.streams.length).toBe(1); // polling, not reopening, for this selection
      expect(warn).toHaveBeenCalledTimes(how === 'fail' ? 1 : 0);
      warn.mockRestore();
      feed.dispose();
    }
  );

  it('follows by polling when the stream cannot be opened at all', async () => {
    const server = logServer();
    server.state.refuseStreams = true;
    server.write(0, 'a');
    const feed = feedOf(server);
    const warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
    await feed.start();
    await until(() => server.state.refused === 1, 'the stream to be asked for');
    server.write(0, 'b');
    server.end();
    await until(() => feed.selection.done, 'the end, by polling');
    expect(texts(feed)).toEqual(['[rank0] a', '[rank0] b']);
    expect(server.state.refused).toBe(1);
    expect(warn).toHaveBeenCalledTimes(1);
    warn.mockRestore();
    feed.dispose();
  });

  it('lists the replicas once, and shows one replica from its own offsets', async () => {
    const server = logServer();
    server.write(0, 'zero');
    server.write(1, 'one');
    const feed = feedOf(server);
    let resets = 0;
    feed.changed.connect((_, change) => change.kind === 'reset' && resets++);
    await feed.start();
    await until(() => feed.job.replicas.length > 0, 'the replicas');
    await until(() => server.state.streams.length === 1, 'the stream of all replicas');
    expect(feed.job).toEqual({ replicas: ['rank-0', 'rank-1'], name: 'demo', endedPhase: null });

    await feed.select({ replica: 'rank-1' });
    expect(feed.selection.replica).toBe('rank-1');
    expect(resets).toBe(2);
    expect(texts(feed)).toEqual(['one']);
    expect(server.state.queries).toContainEqual({ replica: 'rank-1', tail: 1000, limit: 1000 });
    await until(() => server.state.streams.some(s => s.query.replica === 'rank-1'), 'its stream');
    expect(server.state.streams[0].signal.aborted).toBe(true); // the other selection's stream
    server.write(0, 'not shown');
    server.write(1, 'shown');
    expect(texts(feed)).toEqual(['one', 'shown']);
    expect(server.state.jobCalls).toBe(1);
    feed.dispose();
  });

  it('drops the answers of a selection left before they came', async () => {
    const server = logServer();
    server.write(0, 'zero');
    server.write(1, 'one');
    let release: () => void = () => undefined;
    const slow = new Promise<void>(resolve => (release = resolve));
    const feed = feedOf(server, {
      fetchLogs: async (id, query) => {
        if (!query.replica) {
          await slow; // the first (all replicas) answer comes late
        }
        return server.fetchLogs(id, query);
      }
    });
    const appended: number[] = [];
    feed.changed.connect((_, change) => change.kind === 'lines' && appended.push(change.first));
    const first = feed.start();
    await feed.select({ replica: 'rank-0' });
    expect(appended).toEqual([0]);
    release();
    await first;
    expect(appended).toEqual([0]); // nothing of the late answer reached the view
    expect(texts(feed)).toEqual(['zero']);
    expect(feed.status.message).toBeNull();
    feed.dispose();
  });

  it('says why the log cannot be loaded', async () => {
    const feed = feedOf(logServer(), {
      fetchLogs: async () => {
        throw new Error('404 Not Found');
      }
    });
    await feed.start();
    expect(feed.status).toEqual({ message: 'Cannot load the log: 404 Not Found', error: true });
    expect(feed.poll.state.phase).not.toBe('started');
    feed.dispose();
  });

  it('loads the log of a job it cannot read, with no replicas to offer', async () => {
    const server = logServer();
    server.write(0, 'a');
    let asked = false;
    const feed = feedOf(server, {
      fetchJob: async () => {
        asked = true;
        throw new Error('gone');
      }
    });
    await feed.start();
    await until(() => asked, 'the job to be asked for');
    expect(texts(feed)).toEqual(['[rank0] a']);
    expect(feed.job).toEqual({ replicas: [], name: null, endedPhase: null });
    expect(feed.status).toEqual({ message: null, error: false });
    feed.dispose();
  });

  it('reads the whole log for a download, saying how far it got or why it failed', async () => {
    const server = logServer();
    for (let i = 0; i < PAGE + 1; i++) {
      server.write(0, `l${i}`);
    }
    server.end();
    const feed = feedOf(server, { tail: 10 });
    await feed.start();
    const messages: (string | null)[] = [];
    feed.changed.connect(
      (_, change) => change.kind === 'status' && messages.push(feed.status.message)
    );
    const chunks = await feed.readAll();
    expect(chunks!.join('')).toBe(Array.from({ length: PAGE + 1 }, (_, i) => `l${i}\n`).join(''));
    expect(messages).toEqual([
      'Preparing download…',
      `Preparing download… ${PAGE.toLocaleString()} lines`,
      `Preparing download… ${(PAGE + 1).toLocaleString()} lines`,
      null
    ]);
    expect(feed.selection.buffer.length).toBe(10); // the view's lines are not touched

    server.state.queries = [];
    const broken = feedOf(server, {
      fetchLogs: async () => {
        throw new Error('server down');
      }
    });
    expect(await broken.readAll()).toBeNull();
    expect(broken.status).toEqual({ message: 'Download failed: server down', error: true });
    feed.dispose();
    broken.dispose();
  });
});
