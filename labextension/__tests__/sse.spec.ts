import { readEvents, SseParser } from '../rest/sse';

/** A response whose body arrives in the given pieces, as a server's stream would. */
function streamed(pieces: string[], type = 'text/event-stream; charset=utf-8'): Response {
  const bytes = pieces.map(p => new TextEncoder().encode(p));
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const b of bytes) {
        controller.enqueue(b);
      }
      controller.close();
    }
  });
  return new Response(body, { headers: { 'Content-Type': type } });
}

describe('SseParser', () => {
  it('parses events cut anywhere, with \\n, \\r\\n and \\r line ends', () => {
    const text =
      'id: 5\nevent: lines\ndata: {"a":1}\n\n' +
      ': keep-alive\r\n\r\n' +
      'event: end\r\ndata: one\r\ndata: two\r\r\n';
    for (let cut = 0; cut <= text.length; cut++) {
      const parser = new SseParser();
      const events = [...parser.push(text.slice(0, cut)), ...parser.push(text.slice(cut))];
      expect(events).toEqual([
        { event: 'lines', data: '{"a":1}', id: '5' },
        { event: 'end', data: 'one\ntwo', id: '5' } // the last id carries over
      ]);
    }
  });

  it('skips comments and events without data, and defaults the event name', () => {
    const parser = new SseParser();
    expect(parser.push(': hi\n\nevent: nothing\n\ndata:x\n\n')).toEqual([
      { event: 'message', data: 'x', id: '' }
    ]);
  });
});

describe('readEvents', () => {
  it('reads a streamed body to its end, multi-byte characters split across pieces', async () => {
    const whole = new TextEncoder().encode('event: lines\ndata: "é"\n\n');
    const split = whole.indexOf(0xc3) + 1; // inside the two bytes of é
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(whole.slice(0, split));
        controller.enqueue(whole.slice(split));
        controller.close();
      }
    });
    const events: string[] = [];
    await readEvents(new Response(body, { headers: { 'Content-Type': 'text/event-stream' } }), e =>
      events.push(e.data)
    );
    expect(events).toEqual(['"é"']);
  });

  it('refuses an answer that is not an event stream', async () => {
    await expect(readEvents(streamed(['{}'], 'application/json'), () => 0)).rejects.toThrow(
      'expected an event stream, got application/json'
    );
  });
});
