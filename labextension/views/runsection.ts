/**
 * The Runs section of a job's details: for each run of `em`, its progress, hparams, a small
 * chart per metric and its artifacts with download links. Hidden while the job has no run.
 */
import { downloadIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { artifactUrl } from '../rest/client';
import { CHART_SIZE, renderChart } from '../render/chart';
import { keyValues, section, table } from '../render/dom';
import { formatBytes, formatProgress, formatTime, formatValue } from '../render/format';
import { chartIcon } from '../icons';
import { JobRunsModel, RunSeries } from '../models/jobrunsmodel';
import { tensorboardRunFilter } from '../models/runsmodel';
import { IArtifactFile, IRunProgress, IRunSummary, JOB_RUN } from '../rest/types';

/** A run's status as a badge coloured like the job phase it corresponds to. */
export function runStatusBadge(status: string): HTMLSpanElement {
  const like: Record<string, string> = {
    running: 'running',
    finished: 'succeeded',
    failed: 'failed',
    interrupted: 'cancelled'
  };
  const badge = document.createElement('span');
  badge.className = `jp-DistTrain-badge jp-DistTrain-phase-${like[status] ?? 'pending'}`;
  badge.textContent = status;
  return badge;
}

/** A bar (when the total is known) and the step, total and time left as text. */
export function progressBar(progress: IRunProgress): HTMLElement {
  const box = document.createElement('div');
  box.className = 'jp-DistTrainRun-progress';
  const { step, total_steps: total } = progress;
  if (total) {
    const done = Math.min(step ?? 0, total);
    const bar = document.createElement('div');
    bar.className = 'jp-DistTrainRun-bar';
    bar.setAttribute('role', 'progressbar');
    bar.setAttribute('aria-valuemin', '0');
    bar.setAttribute('aria-valuemax', String(total));
    bar.setAttribute('aria-valuenow', String(done));
    const fill = document.createElement('div');
    fill.className = 'jp-DistTrainRun-fill';
    fill.style.width = `${(100 * done) / total}%`;
    bar.append(fill);
    box.append(bar);
  }
  const text = document.createElement('span');
  text.className = 'jp-DistTrainRun-progressText';
  text.textContent = formatProgress(progress) || 'no step logged yet';
  box.append(text);
  return box;
}

function artifactLink(jobId: string, run: string, file: IArtifactFile): HTMLAnchorElement {
  const a = document.createElement('a');
  a.className = 'jp-DistTrainRun-download';
  a.href = artifactUrl(jobId, run, file.path);
  a.download = file.path.split('/').pop() ?? file.path;
  a.append(downloadIcon.element({ tag: 'span', height: '14px', width: '14px' }), 'Download');
  a.title = `Download ${file.path}`;
  return a;
}

export class RunsSection extends Widget {
  /**
   * @param openTensorBoard opens the job's TensorBoard showing the runs `runFilter` finds
   */
  constructor(
    readonly model: JobRunsModel,
    private _openTensorBoard: ((runFilter: string) => void) | null = null
  ) {
    super();
    this.addClass('jp-DistTrainRuns-section');
    model.changed.connect(this._render, this);
    this._render();
  }

  dispose(): void {
    this.model.changed.disconnect(this._render, this);
    super.dispose();
  }

  private _render(): void {
    const { runs, error } = this.model;
    this.node.hidden = runs.length === 0 && !error;
    const parts: HTMLElement[] = [section(runs.length === 1 ? 'Run' : `Runs (${runs.length})`)];
    if (error) {
      const why = document.createElement('div');
      why.className = 'jp-DistTrainDetails-reason jp-mod-warn';
      why.textContent = `Cannot load the runs: ${error}`;
      parts.push(why);
    }
    for (const summary of runs) {
      const series = this.model.get(summary.run);
      if (series) {
        parts.push(this._run(summary, series));
      }
    }
    this.node.replaceChildren(...parts);
  }

  private _run(summary: IRunSummary, series: RunSeries): HTMLElement {
    const box = document.createElement('section');
    box.className = 'jp-DistTrainRun';
    box.dataset.run = summary.run;
    const head = document.createElement('div');
    head.className = 'jp-DistTrainRun-head';
    const h = document.createElement('h4');
    h.textContent =
      summary.run === JOB_RUN ? 'Hyper-parameters captured at submit (no run of em)' : summary.run;
    const when = document.createElement('span');
    when.className = 'jp-DistTrainRun-time';
    when.textContent = `${formatTime(summary.start_time)} – ${formatTime(summary.end_time)}`;
    const detail = series.detail;
    head.append(h, runStatusBadge(detail?.status ?? summary.status), when);
    const resumedAt = detail?.resumed_at ?? []; // a server before checkpoints sends none
    if (resumedAt.length) {
      const resumed = document.createElement('span');
      resumed.className = 'jp-DistTrainRun-resumed';
      resumed.textContent = `resumed at step ${resumedAt.join(', ')}`;
      resumed.title = 'One line across the checkpoint(s) it continued from, marked on each chart';
      head.append(resumed);
    }
    if (this._openTensorBoard) {
      head.append(this._tensorboardButton(summary.run));
    }
    box.append(head);
    if (summary.run !== JOB_RUN) {
      box.append(progressBar(detail?.progress ?? summary)); // the job's hparams have no steps
    }

    const hparams = Object.entries(summary.hparams);
    if (hparams.length) {
      box.append(
        subsection('Hyper-parameters'),
        keyValues(
          hparams.map(([k, v]) => [k, formatValue(v)]),
          'jp-DistTrainRun-hparams'
        )
      );
    }
    if (series.series.size) {
      const charts = document.createElement('div');
      charts.className = 'jp-DistTrainRun-charts';
      const keys = [...series.series.keys()].sort((a, b) => a.localeCompare(b));
      charts.append(
        ...keys.map(key => renderChart(key, series.series.get(key)!, CHART_SIZE, resumedAt))
      );
      box.append(subsection('Metrics'), charts);
    }
    const files = detail?.artifacts ?? [];
    if (files.length) {
      box.append(
        subsection('Artifacts'),
        table(
          ['Artifact', 'File', 'Size', ''],
          files.map(f => [
            f.name,
            f.path.slice(f.name.length + 1),
            formatBytes(f.size),
            artifactLink(summary.job_id, summary.run, f)
          ]),
          'jp-DistTrainRun-artifacts'
        )
      );
    }
    return box;
  }

  /** In the job's own TensorBoard a run of em is `<run>` (and `<run>/rank-N`); the job's row, all. */
  private _tensorboardButton(run: string): HTMLButtonElement {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'jp-DistTrainRun-tensorboard jp-Button jp-mod-minimal';
    b.title = `Show ${run === JOB_RUN ? 'this job' : run} in the job's TensorBoard`;
    b.append(chartIcon.element({ tag: 'span', height: '14px', width: '14px' }), 'TensorBoard');
    b.addEventListener('click', () => {
      this._openTensorBoard?.(run === JOB_RUN ? '' : tensorboardRunFilter([run]));
    });
    return b;
  }
}

function subsection(text: string): HTMLElement {
  const h = document.createElement('h5');
  h.className = 'jp-DistTrainRun-subsection';
  h.textContent = text;
  return h;
}
