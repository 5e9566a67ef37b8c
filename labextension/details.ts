/**
 * Job details: spec summary, replica table (with exit codes and reasons, the latest resource
 * values and a Stack action), resource sparklines, conditions, events, the runs of experiment
 * tracking (`RunsSection`), and the packaged script in JupyterLab's own read-only editor.
 */
import { CodeEditor, CodeEditorWrapper, IEditorServices } from '@jupyterlab/codeeditor';
import { Message } from '@lumino/messaging';
import { Panel, Widget } from '@lumino/widgets';

import { IJobDetail, TERMINAL_PHASES } from './api';
import { JobDetailsModel } from './detailsmodel';
import { keyValues, nameRows, section, table } from './dom';
import { formatTime, jobShape, rolesText } from './format';
import { phaseBadge } from './panel';
import { ResourcesModel } from './resources';
import { quietBadge, resourcesSection, usageCells, usageHeaders } from './resourcesview';
import { RunsSection } from './runsection';

export interface IJobDetailsOptions {
  /** The job's resource series (the Resources section and the table's usage columns). */
  resources?: ResourcesModel;
  /** Dump a replica's stacks (the Stack action; absent: no action). */
  onStack?: (replica: string) => void;
  /** The runs of experiment tracking (absent: no Runs section). */
  runs?: RunsSection;
}

export class JobDetails extends Panel {
  constructor(
    readonly model: JobDetailsModel,
    private _editors: IEditorServices | null,
    options: IJobDetailsOptions = {}
  ) {
    super();
    this.resources = options.resources ?? null;
    this._onStack = options.onStack ?? null;
    this.addClass('jp-DistTrainDetails');
    this.title.label = `Job: ${model.jobId}`;
    this._info = new Widget();
    this._info.addClass('jp-DistTrainDetails-info');
    this._info.node.textContent = 'Loading…';
    this.addWidget(this._info);
    this.runs = options.runs ?? null;
    if (this.runs) {
      this.addWidget(this.runs);
    }
    model.changed.connect(this._update, this);
    this.resources?.changed.connect(this._update, this);
  }

  readonly resources: ResourcesModel | null;
  readonly runs: RunsSection | null;

  get jobId(): string {
    return this.model.jobId;
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    void this.model.start();
    void this.resources?.start();
    void this.runs?.model.start();
  }

  dispose(): void {
    this.model.dispose();
    this.resources?.dispose();
    this.runs?.model.dispose();
    super.dispose();
  }

  private _update(): void {
    const { job, error, script } = this.model;
    if (error) {
      this._info.node.textContent = `Cannot load job ${this.jobId}: ${error}`;
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
    const heading = new Widget({ node: section(`Packaged script (${name})`) });
    this.addWidget(heading);
    if (this._editors) {
      const model = new CodeEditor.Model({ mimeType: 'text/x-python' });
      model.sharedModel.setSource(text);
      model.mimeType = this._editors.mimeTypeService.getMimeTypeByFilePath(name);
      const editor = new CodeEditorWrapper({
        factory: this._editors.factoryService.newDocumentEditor,
        model,
        editorOptions: { config: { readOnly: true, lineNumbers: true } }
      });
      this._script = editor;
    } else {
      const pre = document.createElement('pre');
      pre.textContent = text;
      this._script = new Widget({ node: pre });
    }
    this._script.addClass('jp-DistTrainDetails-script');
    this.addWidget(this._script);
  }

  private _render(job: IJobDetail): void {
    const { spec, status, summary } = job;
    const root = document.createElement('div');

    const head = document.createElement('div');
    head.className = 'jp-DistTrainDetails-head';
    const h = document.createElement('h2');
    h.textContent = summary.name;
    const id = document.createElement('code');
    id.textContent = job.id;
    head.append(h, phaseBadge(status.phase), id);
    root.append(head);
    if (status.reason || status.message) {
      const why = document.createElement('div');
      why.className = 'jp-DistTrainDetails-reason';
      why.classList.toggle('jp-mod-failed', status.phase === 'Failed');
      why.textContent = [status.reason, status.message].filter(Boolean).join(': ');
      root.append(why);
    }
    if (job.backend_error) {
      // The status shown is the stored one: say why the backend could not give a fresh one.
      const stale = document.createElement('div');
      stale.className = 'jp-DistTrainDetails-reason jp-mod-warn';
      stale.textContent = `Backend unavailable, showing the last stored status: ${job.backend_error}`;
      root.append(stale);
    }

    root.append(section('Spec'));
    const env = Object.entries(spec.env ?? {});
    root.append(
      keyValues([
        ['Backend', spec.backend],
        ['Launcher', spec.launcher],
        ['Roles', rolesText(job.roles, status.replicas)],
        ['Shape', `${jobShape(summary)} (world size ${spec.nodes * spec.nproc_per_node})`],
        ['Accelerator', spec.accelerator],
        ['Image', spec.image ?? '–'],
        ['CPU / memory', `${spec.cpu ?? '–'} / ${spec.memory ?? '–'}`],
        [
          'Volumes',
          spec.volumes?.length
            ? spec.volumes
                .map(v => `${v.claim} → ${v.mount_path}${v.read_only ? ' (ro)' : ''}`)
                .join(', ')
            : '–'
        ],
        ['Env', env.length ? env.map(([k, v]) => `${k}=${v}`).join(' ') : '–'],
        [
          'Command',
          `torchrun --nnodes ${spec.nodes} --nproc-per-node ${spec.nproc_per_node} ${spec.entrypoint} ${(spec.args ?? []).join(' ')}`.trim()
        ],
        ['Created', formatTime(status.created ?? summary.created)],
        [
          'Started / finished',
          `${formatTime(status.start_time)} / ${formatTime(status.finish_time)}`
        ]
      ])
    );

    root.append(section('Replicas'));
    root.append(this._replicas(job));
    if (this.resources) {
      root.append(section('Resources'), resourcesSection(this.resources));
    }

    if (status.conditions?.length) {
      root.append(section('Conditions'));
      root.append(
        table(
          ['Type', 'Status', 'Reason', 'Message', 'Since'],
          status.conditions.map(c => [
            c.type,
            c.status,
            c.reason ?? '–',
            c.message ?? '–',
            formatTime(c.last_transition_time)
          ])
        )
      );
    }
    if (status.events?.length) {
      root.append(section('Events'));
      root.append(
        table(
          ['Time', 'Type', 'Reason', 'Object', 'Message', 'Count'],
          status.events.map(e => [
            formatTime(e.time),
            e.type,
            e.reason,
            e.object ?? '–',
            e.message,
            String(e.count)
          ]),
          'jp-DistTrainDetails-events'
        )
      );
    }
    // a redraw (every few seconds while it runs) keeps the focused action focused
    const focused = document.activeElement as HTMLElement | null;
    const key = focused && this.node.contains(focused) ? focused.dataset.focusKey : undefined;
    this._info.node.replaceChildren(root);
    if (key) {
      root.querySelector<HTMLElement>(`[data-focus-key="${CSS.escape(key)}"]`)?.focus();
    }
  }

  /** The replica table: status, the latest resource values and the Stack action. */
  private _replicas(job: IJobDetail): HTMLElement {
    const resources = this.resources;
    const running = !TERMINAL_PHASES.has(job.status.phase);
    const head = [
      'Name',
      'Role',
      'Index',
      'Phase',
      'Restarts',
      'Exit code',
      'Reason',
      'Node',
      'Started',
      'Finished',
      ...(resources ? usageHeaders(resources) : []),
      ...(this._onStack ? [''] : [])
    ];
    const rows = job.status.replicas.map(r => {
      const name = document.createElement('span');
      name.textContent = r.name;
      if (resources?.replicas.get(r.name)?.quiet) {
        name.append(' ', quietBadge());
      }
      const cells: (string | HTMLElement)[] = [
        name,
        r.role,
        String(r.index),
        phaseBadge(r.phase),
        String(r.restarts),
        r.exit_code === null || r.exit_code === undefined ? '–' : String(r.exit_code),
        [r.reason, r.message].filter(Boolean).join(': ') || '–',
        r.node ?? '–',
        formatTime(r.start_time),
        formatTime(r.finish_time),
        ...(resources ? usageCells(resources, r.name) : [])
      ];
      if (this._onStack) {
        const live = running && !TERMINAL_PHASES.has(r.phase);
        cells.push(live ? this._stackButton(r.name) : '');
      }
      return cells;
    });
    const t = table(head, rows, 'jp-DistTrainDetails-replicas');
    nameRows(
      t,
      'replica',
      job.status.replicas.map(r => r.name)
    );
    return t;
  }

  private _stackButton(replica: string): HTMLButtonElement {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'jp-Button jp-mod-minimal jp-mod-small jp-DistTrainDetails-stack';
    b.textContent = 'Stack';
    b.title = `Dump the Python stacks of every thread of ${replica}`;
    b.setAttribute('aria-label', `Stack of ${replica}`);
    b.dataset.focusKey = `stack/${replica}`;
    b.addEventListener('click', () => this._onStack?.(replica));
    return b;
  }

  private _onStack: ((replica: string) => void) | null;
  private _info: Widget;
  private _script: Widget | null = null;
}
