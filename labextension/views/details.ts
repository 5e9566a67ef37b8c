/**
 * Job details: one panel per job, in tabs as job consoles have them. Overview (the summary
 * with the failure story, the replica table, each run's progress and last metrics), Logs (the
 * log viewer, made when first shown), Resources, Runs (`RunsSection`), Events (conditions and
 * events), Spec and script (the packaged script in JupyterLab's read-only editor). The tabs'
 * contents are the sections of `detailsections.ts`, picked by id.
 */
import { CodeEditor, CodeEditorWrapper, IEditorServices } from '@jupyterlab/codeeditor';
import { Message } from '@lumino/messaging';
import { BoxPanel, Panel, TabPanel, Widget } from '@lumino/widgets';

import { IJobDetail } from '../rest/client';
import { DETAILS_SECTIONS, IDetailsContext } from './detailsections';
import { DiagnosisModel } from '../models/diagnosismodel';
import { JobDetailsModel } from '../models/detailsmodel';
import { section, table } from '../render/dom';
import { formatMetric } from '../render/format';
import { LogViewer } from './logviewer';
import { ResourcesModel } from '../models/resourcesmodel';
import { progressBar, RunsSection, runStatusBadge } from './runsection';
import { runLabel } from '../models/runsmodel';

/**
 * The tabs, in order, and which sections each draws (Runs and Checkpoints show their own
 * widget, given to `JobDetails`).
 */
export const DETAILS_TABS = [
  {
    id: 'overview',
    label: 'Overview',
    sections: ['summary', 'hours', 'progress', 'diagnosis', 'replicas', 'values']
  },
  { id: 'logs', label: 'Logs', sections: [] },
  { id: 'resources', label: 'Resources', sections: ['hours', 'resources'] },
  { id: 'runs', label: 'Runs', sections: [] },
  { id: 'checkpoints', label: 'Checkpoints', sections: [] },
  { id: 'events', label: 'Events', sections: ['conditions', 'events'] },
  { id: 'spec', label: 'Spec and script', sections: ['spec'] }
] as const;

export type DetailsTab = (typeof DETAILS_TABS)[number]['id'];

/** Whether `tab` names one of the tabs (a command's argument, a restored layout's). */
export function isDetailsTab(tab: unknown): tab is DetailsTab {
  return DETAILS_TABS.some(t => t.id === tab);
}

/** What a tab shows when its sections have nothing for the job. */
const EMPTY: Partial<Record<DetailsTab, string>> = {
  resources: 'No resource samples for this job.',
  runs: 'No runs: call em.create_run(...) in the job to track hparams, metrics and artifacts.',
  events: 'No conditions or events for this job.'
};

export interface IJobDetailsOptions {
  /** The job's resource series (the Resources tab and the table's usage columns). */
  resources?: ResourcesModel;
  /** Dump a replica's stacks (the Stack action; absent: no action). */
  onStack?: (replica: string) => void;
  /** The runs of experiment tracking (absent: an empty Runs tab). */
  runs?: RunsSection;
  /** The job's checkpoints (`CheckpointsSection`; absent: an empty Checkpoints tab). */
  checkpoints?: Widget;
  /** Makes the log viewer of the job showing `replica` ('' = all); absent: no Logs tab. */
  logs?: (replica: string) => LogViewer;
  /** The job's diagnoses: the Diagnose action and its verdicts (absent: none). */
  diagnosis?: DiagnosisModel;
}

export class JobDetails extends TabPanel {
  constructor(
    readonly model: JobDetailsModel,
    private _editors: IEditorServices | null,
    options: IJobDetailsOptions = {}
  ) {
    super();
    this.resources = options.resources ?? null;
    this.runs = options.runs ?? null;
    this._onStack = options.onStack ?? null;
    this._makeLogs = options.logs ?? null;
    this._diagnosis = options.diagnosis ?? null;
    this._diagnosis?.changed.connect(this._update, this);
    this.addClass('jp-DistTrainDetails');
    this.tabBar.addClass('jp-DistTrainDetails-tabBar');
    this.title.label = `Job: ${model.jobId}`;
    for (const tab of DETAILS_TABS) {
      if (tab.id === 'logs' && !this._makeLogs) {
        continue;
      }
      const content = tab.id === 'logs' ? new BoxPanel() : new Panel();
      content.addClass('jp-DistTrainDetails-tab');
      content.addClass(`jp-mod-${tab.id}`);
      content.title.label = tab.label;
      content.title.dataset = { tab: tab.id };
      content.id = `${model.jobId}-${tab.id}`.replace(/[^\w-]/g, '_');
      if (tab.id !== 'logs') {
        const info = new Widget();
        info.addClass('jp-DistTrainDetails-info');
        info.node.textContent = 'Loading…';
        content.addWidget(info);
        this._infos.set(tab.id, info);
      }
      this._tabs.set(tab.id, content);
      this.addWidget(content);
    }
    if (options.checkpoints) {
      (this._tabs.get('checkpoints') as Panel).addWidget(options.checkpoints);
    }
    if (this.runs) {
      (this._tabs.get('runs') as Panel).addWidget(this.runs);
      this.runs.model.changed.connect(this._update, this);
    }
    this.currentChanged.connect(this._onTab, this);
    model.changed.connect(this._update, this);
    this.resources?.changed.connect(this._update, this);
  }

  readonly resources: ResourcesModel | null;
  readonly runs: RunsSection | null;

  get jobId(): string {
    return this.model.jobId;
  }

  /** The tab in front. */
  get tab(): DetailsTab {
    const found = [...this._tabs].find(([, w]) => w === this.currentWidget);
    return found ? found[0] : 'overview';
  }

  /** The log viewer, once the Logs tab was shown. */
  get logs(): LogViewer | null {
    return this._logs;
  }

  /** Bring `tab` to front; for Logs, showing `replica` ('' = all) when one is given. */
  showTab(tab: DetailsTab, replica?: string): void {
    const widget = this._tabs.get(tab) ?? this._tabs.get('overview')!;
    if (tab === 'logs' && replica !== undefined) {
      this._replica = replica;
      if (this._logs && this._logs.replica !== replica) {
        void this._logs.feed.select({ replica });
      }
    }
    this.currentWidget = widget;
    this._onTab();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    void this.model.start();
    void this.resources?.start();
    void this.runs?.model.start();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    this.resources?.dispose();
    this.runs?.model.dispose();
    this._diagnosis?.dispose();
    super.dispose();
  }

  /** The log viewer is made when Logs is first shown: a job looked at only here opens no stream. */
  private _onTab(): void {
    if (this.tab === 'logs' && !this._logs && this._makeLogs) {
      this._logs = this._makeLogs(this._replica);
      (this._tabs.get('logs') as BoxPanel).addWidget(this._logs);
    }
  }

  private _update(): void {
    const { job, error, script } = this.model;
    if (error) {
      this._infos.forEach(info => {
        info.node.textContent = `Cannot load job ${this.jobId}: ${error}`;
      });
    } else if (job) {
      this.title.label = `Job: ${job.summary.name}`;
      this._render(job);
      if (this.model.ended) {
        this.runs?.model.markJobEnded();
      }
    }
    if (script && !this._script) {
      this._showScript(script.name, script.text);
    }
  }

  private _showScript(name: string, text: string): void {
    const spec = this._tabs.get('spec') as Panel;
    spec.addWidget(new Widget({ node: section(`Packaged script (${name})`) }));
    if (this._editors) {
      const model = new CodeEditor.Model({ mimeType: 'text/x-python' });
      model.sharedModel.setSource(text);
      model.mimeType = this._editors.mimeTypeService.getMimeTypeByFilePath(name);
      this._script = new CodeEditorWrapper({
        factory: this._editors.factoryService.newDocumentEditor,
        model,
        editorOptions: { config: { readOnly: true, lineNumbers: true } }
      });
    } else {
      const pre = document.createElement('pre');
      pre.textContent = text;
      this._script = new Widget({ node: pre });
    }
    this._script.addClass('jp-DistTrainDetails-script');
    spec.addWidget(this._script);
  }

  /** Every tab's sections drawn afresh from the job. */
  private _render(job: IJobDetail): void {
    const context: IDetailsContext = {
      resources: this.resources,
      onStack: this._onStack,
      diagnosis: this._diagnosis
    };
    // a redraw (every few seconds while it runs) keeps the focused action focused
    const focused = document.activeElement as HTMLElement | null;
    const key = focused && this.node.contains(focused) ? focused.dataset.focusKey : undefined;
    for (const tab of DETAILS_TABS) {
      const info = this._infos.get(tab.id);
      if (!info) {
        continue;
      }
      const root = document.createElement('div');
      for (const part of DETAILS_SECTIONS.filter(s =>
        (tab.sections as readonly string[]).includes(s.id)
      )) {
        root.append(...part.render(job, context));
      }
      if (tab.id === 'overview') {
        root.append(...this._keyMetrics());
      }
      const empty = EMPTY[tab.id];
      const runsShown = tab.id === 'runs' && !!this.runs?.model.runs.length;
      if (!root.childElementCount && empty && !runsShown) {
        root.append(
          Object.assign(document.createElement('p'), {
            className: 'jp-DistTrainDetails-empty',
            textContent: empty
          })
        );
      }
      info.node.replaceChildren(root);
      if (key) {
        root.querySelector<HTMLElement>(`[data-focus-key="${CSS.escape(key)}"]`)?.focus();
      }
    }
  }

  /** Each run's step and last value of its first metrics, at a glance (the Runs tab has it all). */
  private _keyMetrics(): HTMLElement[] {
    const runs = this.runs?.model.runs ?? [];
    if (!runs.length) {
      return [];
    }
    const names = [...new Set(([] as string[]).concat(...runs.map(r => Object.keys(r.metrics))))]
      .sort()
      .slice(0, 6);
    const rows = runs.map(r => [
      runLabel(r.run),
      runStatusBadge(r.status),
      progressBar(r),
      ...names.map(n => (r.metrics[n] === undefined ? '–' : formatMetric(r.metrics[n])))
    ]);
    return [
      section('Key metrics'),
      table(['Run', 'Status', 'Progress', ...names], rows, 'jp-DistTrainDetails-keyMetrics')
    ];
  }

  private _onStack: ((replica: string) => void) | null;
  private _diagnosis: DiagnosisModel | null;
  private _makeLogs: ((replica: string) => LogViewer) | null;
  private _logs: LogViewer | null = null;
  private _replica = '';
  private _tabs = new Map<DetailsTab, Panel | BoxPanel>();
  private _infos = new Map<DetailsTab, Widget>();
  private _script: Widget | null = null;
}
