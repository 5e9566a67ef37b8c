/**
 * The one client of the server extension's REST API (`docs/rest-api.md`).
 *
 * Every call goes through `ServerConnection`, which adds the token / XSRF header and the
 * base URL, so the same code works in JupyterLab, Notebook 7 and behind JupyterHub.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { dispatchLogEvent, ILogStreamHandlers } from './logstream';
import { readEvents } from './sse';
import type {
  ICancelAnswer,
  ICheckpointCode,
  ICheckpointList,
  IDebugAnswer,
  IIncident,
  IJobDetail,
  IJobList,
  IJobScript,
  IJobSummary,
  ILogPage,
  ILogQuery,
  IPoolList,
  IReleaseAnswer,
  IResources,
  IRunDetail,
  IRunList,
  IRunQuery,
  IResumeAnswer,
  IRunSummary,
  IStackDump,
  ISubmitAnswer,
  ITensorBoardInfo
} from './types';

export * from './types';

/** The server's answer to a failed request, with its one-line message when it sent one. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
  }
}

const API = ['disttrain', 'api'];

/** Absolute URL of a route under `<base_url>/disttrain/api/`. */
export function apiUrl(
  path: string,
  query: Record<string, string | number | boolean | undefined> = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): string {
  const url = URLExt.join(settings.baseUrl, ...API, path);
  const params = Object.entries(query)
    .filter(([, v]) => v !== undefined && v !== '')
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`);
  return params.length ? `${url}?${params.join('&')}` : url;
}

/** Where TensorBoard for a job (or `ALL_JOBS`) is proxied. */
export function tensorboardUrl(
  id: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): string {
  return URLExt.join(settings.baseUrl, 'disttrain', 'tensorboard', encodeURIComponent(id), '/');
}

/** The `message` (Jupyter's JSON errors) or `reason` of an error body, if it has either. */
function errorReason(data: unknown): unknown {
  if (!data || typeof data !== 'object') {
    return undefined;
  }
  const body = data as { message?: unknown; reason?: unknown };
  return body.message || body.reason;
}

/** The JSON of a body, or null when it is empty or not JSON. */
function parseJson(text: string): unknown {
  try {
    return text ? JSON.parse(text) : null;
  } catch {
    return null;
  }
}

/** Send a request with the server's token/XSRF; throws `ApiError` when it cannot be sent. */
async function send(
  path: string,
  init: RequestInit,
  query: Record<string, string | number | boolean | undefined>
): Promise<Response> {
  const settings = ServerConnection.makeSettings();
  try {
    return await ServerConnection.makeRequest(apiUrl(path, query, settings), init, settings);
  } catch (err) {
    throw new ApiError(`cannot reach the Jupyter server: ${err}`, 0);
  }
}

/** The `ApiError` of a failed answer, with the server's message when it sent one. */
async function failure(response: Response): Promise<ApiError> {
  const data = parseJson(await response.text());
  const message = errorReason(data) || `${response.status} ${response.statusText}`;
  return new ApiError(String(message), response.status);
}

/** Call the API; JSON in and out; throws `ApiError` carrying the server's message. */
export async function requestAPI<T>(
  path: string,
  init: RequestInit = {},
  query: Record<string, string | number | boolean | undefined> = {}
): Promise<T> {
  const response = await send(path, init, query);
  if (!response.ok) {
    throw await failure(response);
  }
  return parseJson(await response.text()) as T;
}

const enc = encodeURIComponent;

let lastRoots: readonly string[] = [];

export async function listJobs(): Promise<IJobSummary[]> {
  const answer = await requestAPI<IJobList>('jobs');
  lastRoots = answer.roots;
  return answer.jobs;
}

/** The job roots the last listing searched (the server's own root, then the user's others). */
export function searchedRoots(): readonly string[] {
  return lastRoots;
}

export function getJob(id: string): Promise<IJobDetail> {
  return requestAPI<IJobDetail>(`jobs/${enc(id)}`);
}

export function getScript(id: string): Promise<IJobScript> {
  return requestAPI<IJobScript>(`jobs/${enc(id)}/script`);
}

export function getLogs(id: string, query: ILogQuery): Promise<ILogPage> {
  return requestAPI<ILogPage>(`jobs/${enc(id)}/logs`, {}, { ...query });
}

/**
 * Follow a log through the event stream from `offset` until the job ends (resolves true),
 * the server closes the stream early (false) or `signal` aborts it. Throws when the stream
 * cannot be opened or fails; the caller then polls `getLogs` from its last token.
 */
export async function streamLogs(
  id: string,
  query: { replica?: string; offset?: string },
  handlers: ILogStreamHandlers,
  signal: AbortSignal
): Promise<boolean> {
  const response = await send(
    `jobs/${enc(id)}/logs/stream`,
    { headers: { Accept: 'text/event-stream' }, cache: 'no-store', signal },
    { ...query }
  );
  if (!response.ok) {
    throw await failure(response);
  }
  let ended = false;
  await readEvents(response, event => {
    ended = dispatchLogEvent(event, handlers) || ended;
  });
  return ended;
}

/** Resource samples of every replica newer than `since` (server seconds; all when undefined). */
export function getResources(id: string, since?: number): Promise<IResources> {
  return requestAPI<IResources>(`jobs/${enc(id)}/resources`, {}, { since });
}

/** Dump the Python stacks of a running replica (404 unknown replica, 409 ended job). */
export function dumpStack(id: string, replica: string): Promise<IStackDump> {
  return requestAPI<IStackDump>(`jobs/${enc(id)}/replicas/${enc(replica)}/stack`, {
    method: 'POST'
  });
}

/** One pdb command at a rank's debugger prompt (`line` absent: only look); `q` cancels the job. */
export function debugRank(id: string, replica: string, line?: string): Promise<IDebugAnswer> {
  return requestAPI<IDebugAnswer>(`jobs/${enc(id)}/debug/${enc(replica)}`, {
    method: 'POST',
    body: JSON.stringify(line === undefined ? {} : { line })
  });
}

export function cancelJob(id: string): Promise<ICancelAnswer> {
  return requestAPI<ICancelAnswer>(`jobs/${enc(id)}/cancel`, { method: 'POST' });
}

export async function deleteJob(id: string): Promise<void> {
  await requestAPI(`jobs/${enc(id)}`, { method: 'DELETE' });
}

/** Start (or find) the TensorBoard of a job, or of all jobs (`ALL_JOBS`); waits until it serves. */
export function startTensorBoard(id: string): Promise<ITensorBoardInfo> {
  return requestAPI<ITensorBoardInfo>(`tensorboard/${enc(id)}`, { method: 'POST' });
}

/** Every run (of `em`) of every job, or of the job `job`. */
export async function listRuns(job?: string): Promise<IRunSummary[]> {
  return (await requestAPI<IRunList>('runs', {}, { job })).runs;
}

/** A run's record, artifacts, progress and its metric points from byte offset `query.since`. */
export function getRun(job: string, run: string, query: IRunQuery = {}): Promise<IRunDetail> {
  return requestAPI<IRunDetail>(`jobs/${enc(job)}/runs/${enc(run)}`, {}, { ...query });
}

/**
 * The download URL of a run's artifact file (`<artifact>/<file>`), for a plain link: like
 * JupyterLab's file downloads it carries the `_xsrf` cookie's value, so the server may check
 * that the GET comes from this page.
 */
export function artifactUrl(
  job: string,
  run: string,
  path: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings(),
  cookie: string = documentCookie()
): string {
  const file = path.split('/').map(enc).join('/');
  return downloadUrl(`jobs/${enc(job)}/runs/${enc(run)}/artifacts/${file}`, settings, cookie);
}

/** The URL of a GET route for a plain download, with the `_xsrf` cookie's value (see above). */
function downloadUrl(path: string, settings: ServerConnection.ISettings, cookie: string): string {
  const url = apiUrl(path, {}, settings);
  const xsrf = /\b_xsrf=([^;]*)/.exec(cookie);
  return xsrf ? `${url}?_xsrf=${enc(xsrf[1])}` : url;
}

/** A job's checkpoints, their disk usage and the checkpoint it started from. */
export function listCheckpoints(id: string): Promise<ICheckpointList> {
  return requestAPI<ICheckpointList>(`jobs/${enc(id)}/checkpoints`);
}

/** The code of a cell that loads checkpoint `cid` of job `id` in the kernel. */
export function getCheckpointCode(id: string, cid: string): Promise<ICheckpointCode> {
  return requestAPI<ICheckpointCode>(`jobs/${enc(id)}/checkpoints/${enc(cid)}/code`);
}

/** Run job `id`'s own spec and script again, from the start (a new job). */
export function resubmitJob(id: string): Promise<ISubmitAnswer> {
  return requestAPI<ISubmitAnswer>(`jobs/${enc(id)}/resubmit`, { method: 'POST' });
}

/** Run job `id`'s script again from its checkpoint `checkpoint` (an id, a step or `latest`). */
export function resumeJob(id: string, checkpoint: string | number): Promise<IResumeAnswer> {
  return requestAPI<IResumeAnswer>(`jobs/${enc(id)}/resume`, {
    method: 'POST',
    body: JSON.stringify({ checkpoint })
  });
}

/** The download URL of a checkpoint (a directory comes as a tar archive), like `artifactUrl`. */
export function checkpointUrl(
  id: string,
  cid: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings(),
  cookie: string = documentCookie()
): string {
  return downloadUrl(`jobs/${enc(id)}/checkpoints/${enc(cid)}/download`, settings, cookie);
}

function documentCookie(): string {
  try {
    return document.cookie;
  } catch {
    return ''; // a sandboxed page has no cookie access
  }
}

/** Diagnose the running job now (409 once it has ended): the incident, kept under its name. */
export function diagnoseJob(id: string): Promise<IIncident> {
  return requestAPI<IIncident>(`jobs/${enc(id)}/diagnose`, { method: 'POST' });
}

/** One of the job's incidents, by the name its details list. */
export function getIncident(id: string, name: string): Promise<IIncident> {
  return requestAPI<IIncident>(`jobs/${enc(id)}/incidents/${enc(name)}`);
}

/** The capacity kept warm between jobs (Slurm's warm steps), of every backend that keeps it. */
export function listPools(): Promise<IPoolList> {
  return requestAPI<IPoolList>('pools');
}

/** Give a warm pool back now; one running a job only with `force` (the job fails). */
export function releasePool(id: string, force = false): Promise<IReleaseAnswer> {
  return requestAPI<IReleaseAnswer>(`pools/${enc(id)}`, { method: 'DELETE' }, { force });
}
