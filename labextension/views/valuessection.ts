/**
 * The details' "Values" section: what `--out`/`--out-all` kept of the job (name, rank, kind and
 * type, size), what did not come back and why, and how to load them into a kernel.
 */
import { section, table } from '../render/dom';
import { formatBytes } from '../render/format';
import { IJobDetail } from '../rest/client';

export function keptValues(job: IJobDetail): HTMLElement[] {
  if (!job.values?.length) {
    return [];
  }
  const rows = job.values.map(v =>
    v.refused === null
      ? [v.name, String(v.rank), `${v.kind} ${v.type}`, formatBytes(v.bytes)]
      : [v.name, String(v.rank), `not kept: ${v.refused}`, '–']
  );
  const t = table(['Name', 'Rank', 'Kind', 'Size'], rows, 'jp-DistTrainDetails-values');
  const how = document.createElement('div');
  how.className = 'jp-DistTrainDetails-valuesLoad';
  const code = document.createElement('code');
  code.textContent = `%distrun load ${job.id}`;
  how.append('Load them into a kernel with ', code);
  return [section('Values'), t, how];
}
