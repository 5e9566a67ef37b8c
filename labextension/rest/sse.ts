/**
 * Server-sent events read from a fetch response (EventSource cannot send Jupyter's token
 * header). `SseParser` is the pure text/event-stream parser; `readEvents` feeds it a
 * response body. No Jupyter imports, so the tests load it bare.
 */

export interface ISseEvent {
  /** `event:` (default `message`). */
  event: string;
  /** `data:` lines joined by `\n`. */
  data: string;
  /** `id:` of this event, or the last one seen before it ('' when none). */
  id: string;
}

/** Parses a text/event-stream as its text arrives, in pieces cut anywhere. */
export class SseParser {
  /** Feed decoded text; returns the events it completed. */
  push(text: string): ISseEvent[] {
    this._rest += text;
    const events: ISseEvent[] = [];
    // a line ends at \r\n, \n or \r; a trailing \r may be the first half of \r\n
    const lines = this._rest.split(/\r\n|\n|\r(?!$)/);
    this._rest = lines.pop() ?? '';
    for (const line of lines) {
      const event = this._line(line);
      if (event) {
        events.push(event);
      }
    }
    return events;
  }

  private _line(line: string): ISseEvent | null {
    if (line === '') {
      // a blank line dispatches the event, if it has data
      const event = this._data.length
        ? { event: this._event || 'message', data: this._data.join('\n'), id: this._id }
        : null;
      this._event = '';
      this._data = [];
      return event;
    }
    if (line.startsWith(':')) {
      return null; // a comment (keep-alive)
    }
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) {
      value = value.slice(1);
    }
    if (field === 'event') {
      this._event = value;
    } else if (field === 'data') {
      this._data.push(value);
    } else if (field === 'id' && !value.includes('\0')) {
      this._id = value;
    }
    return null;
  }

  private _rest = '';
  private _event = '';
  private _data: string[] = [];
  private _id = '';
}

/**
 * Read a text/event-stream response to its end, calling `onEvent` for each event in order.
 * Rejects when the body cannot be read; resolves when the server ends the response.
 */
export async function readEvents(
  response: Response,
  onEvent: (event: ISseEvent) => void
): Promise<void> {
  const type = response.headers.get('Content-Type') ?? '';
  if (!type.startsWith('text/event-stream')) {
    throw new Error(`expected an event stream, got ${type || 'no content type'}`);
  }
  if (!response.body) {
    throw new Error('this browser cannot read a response as a stream');
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const parser = new SseParser();
  for (;;) {
    const { done, value } = await reader.read();
    const text = done ? decoder.decode() : decoder.decode(value, { stream: true });
    for (const event of parser.push(text)) {
      onEvent(event);
    }
    if (done) {
      return;
    }
  }
}
