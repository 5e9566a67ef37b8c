/**
 * Job details: spec summary, replica table (with exit codes and reasons), conditions,
 * events, and the packaged script in JupyterLab's own read-only editor.
 */
import { CodeEditor, CodeEditorWrapper, IEditorServices } from '@jupyterlab/codeeditor';
import { Message } from '@lumino/messaging';
import { Panel, Widget } from '@lumino/widgets';

import { IJobDetail } from './api';
import { JobDetailsModel } from './detailsmodel';
import { formatTime, jobShape, rolesText } from './format';
import { phaseBadge } from './panel';

export class JobDetails extends Panel {
  constructor(
    readonly model: JobDetailsModel,
    private _editors: IEditorServices | null
  ) {
    super();
    this.addClass('jp-DistTrainDetails');
    this.title.label = `Job: ${model.jobId}`;
    this._info = new Widget();
    this._info.addClass('jp-DistTrainDetails-info');
    this._info.node.textContent = 'Loading…';
    this.addWidget(this._info);
    model.changed.connect(this._update, this);
  }

  get jobId(): string {
    return this.model.jobId;
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    void this.model.start();
  }

  dispose(): void {
    this.model.dispose();
    super.dispose();
  }

  private _update(): void {
    const { job, error, script } = this.model;
    if (error) {
      this._info.node.textContent = `Cannot load job ${this.jobId}: ${error}`;
    } else if (job) {
      this.title.label = `Job: ${job.summary.name}`;
      this._render(job);
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
    root.append(
      table(
        [
          'Name',
          'Role',
          'Index',
          'Phase',
          'Restarts',
          'Exit code',
          'Reason',
          'Node',
          'Started',
          'Finished'
        ],
        status.replicas.map(r => [
          r.name,
          r.role,
          String(r.index),
          phaseBadge(r.phase),
          String(r.restarts),
          r.exit_code === null || r.exit_code === undefined ? '–' : String(r.exit_code),
          [r.reason, r.message].filter(Boolean).join(': ') || '–',
          r.node ?? '–',
          formatTime(r.start_time),
          formatTime(r.finish_time)
        ]),
        'jp-DistTrainDetails-replicas'
      )
    );

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
    this._info.node.replaceChildren(root);
  }

  private _info: Widget;
  private _script: Widget | null = null;
}

function section(text: string): HTMLElement {
  const h = document.createElement('h3');
  h.className = 'jp-DistTrainDetails-section';
  h.textContent = text;
  return h;
}

function keyValues(rows: [string, string][]): HTMLElement {
  const dl = document.createElement('dl');
  dl.className = 'jp-DistTrainDetails-spec';
  for (const [k, v] of rows) {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.textContent = v;
    dl.append(dt, dd);
  }
  return dl;
}

function table(head: string[], rows: (string | HTMLElement)[][], className = ''): HTMLElement {
  const t = document.createElement('table');
  t.className = `jp-DistTrainDetails-table ${className}`.trim();
  const tr = document.createElement('tr');
  for (const h of head) {
    const th = document.createElement('th');
    th.scope = 'col';
    th.textContent = h;
    tr.append(th);
  }
  const thead = document.createElement('thead');
  thead.append(tr);
  const tbody = document.createElement('tbody');
  for (const row of rows) {
    const r = document.createElement('tr');
    for (const cell of row) {
      const td = document.createElement('td');
      if (typeof cell === 'string') {
        td.textContent = cell;
      } else {
        td.append(cell);
      }
      r.append(td);
    }
    tbody.append(r);
  }
  t.append(thead, tbody);
  return t;
}
