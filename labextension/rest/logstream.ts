/**
 * Following a job's log through the server's event stream
 * (`GET jobs/<id>/logs/stream`, docs/rest-api.md): `lines` events carry runs of lines with
 * their resume token, `end` the job's last token, `error` a failure after the stream started.
 */
import type { ILogLine, ILogRun } from './types';
import { ISseEvent } from './sse';

export interface ILogStreamHandlers {
  /** New lines and the resume token after them. */
  lines(lines: ILogLine[], offset: string): void;
  /** The job ended and every line was sent; `offset` is the token after the last one. */
  end(phase: string, offset: string): void;
}

/** The lines of runs, each carrying the token after its run (what `LogBuffer` needs). */
export function runLines(runs: ILogRun[]): ILogLine[] {
  const lines: ILogLine[] = [];
  for (const { replica, rank, offset, lines: texts } of runs) {
    for (const text of texts) {
      lines.push({ text, replica, rank, offset });
    }
  }
  return lines;
}

/**
 * Hand one stream event to the handlers. Returns whether the stream ended as it should;
 * throws on an `error` event (the caller falls back to polling from the last token).
 */
export function dispatchLogEvent(event: ISseEvent, handlers: ILogStreamHandlers): boolean {
  const data = JSON.parse(event.data) as {
    runs?: ILogRun[];
    offset?: string;
    phase?: string;
    message?: string;
  };
  switch (event.event) {
    case 'lines':
      handlers.lines(runLines(data.runs ?? []), data.offset ?? event.id);
      return false;
    case 'end':
      handlers.end(data.phase ?? '', data.offset ?? event.id);
      return true;
    case 'error':
      throw new Error(data.message ?? 'the log stream failed');
    default:
      return false; // an event this client does not know: skip it
  }
}
