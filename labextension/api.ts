/**
 * The one client of the server extension's REST API (`docs/rest-api.md`).
 *
 * Every call goes through `ServerConnection`, which adds the token / XSRF header and the
 * base URL, so the same code works in JupyterLab, Notebook 7 and behind JupyterHub.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { IJobDetail, IJobStatus, IJobSummary, ILogPage, ILogQuery } from './types';

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

/** Call the API; JSON in and out; throws `ApiError` carrying the server's message. */
export async function requestAPI<T>(
  path: string,
  init: RequestInit = {},
  query: Record<string, string | number | boolean | undefined> = {}
): Promise<T> {
  const settings = ServerConnection.makeSettings();
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(apiUrl(path, query, settings), init, settings);
  } catch (err) {
    throw new ApiError(`cannot reach the Jupyter server: ${err}`, 0);
  }
  const text = await response.text();
  let data: unknown = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const message = errorReason(data) || `${response.status} ${response.statusText}`;
    throw new ApiError(String(message), response.status);
  }
  return data as T;
}

const enc = encodeURIComponent;

let lastRoots: readonly string[] = [];

export async function listJobs(): Promise<IJobSummary[]> {
  const answer = await requestAPI<{ jobs: IJobSummary[]; roots?: string[] }>('jobs');
  lastRoots = answer.roots ?? [];
  return answer.jobs;
}

/** The job roots the last listing searched (the server's own root, then the user's others). */
export function searchedRoots(): readonly string[] {
  return lastRoots;
}

export function getJob(id: string): Promise<IJobDetail> {
  return requestAPI<IJobDetail>(`jobs/${enc(id)}`);
}

export function getScript(id: string): Promise<{ entrypoint: string; script: string }> {
  return requestAPI(`jobs/${enc(id)}/script`);
}

export function getLogs(id: string, query: ILogQuery): Promise<ILogPage> {
  return requestAPI<ILogPage>(`jobs/${enc(id)}/logs`, {}, { ...query });
}

export function cancelJob(id: string): Promise<{ status: IJobStatus }> {
  return requestAPI(`jobs/${enc(id)}/cancel`, { method: 'POST' });
}

export async function deleteJob(id: string): Promise<void> {
  await requestAPI(`jobs/${enc(id)}`, { method: 'DELETE' });
}

/** Start (or find) the TensorBoard of a job, or of all jobs (`ALL_JOBS`); waits until it serves. */
export function startTensorBoard(id: string): Promise<Record<string, unknown>> {
  return requestAPI(`tensorboard/${enc(id)}`, { method: 'POST' });
}
