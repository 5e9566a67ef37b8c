/**
 * Job details: the sections of `detailsections.ts` (summary, spec, replica table with exit
 * codes and reasons, the latest resource values and a Stack action, resource sparklines,
 * conditions, events), the runs of experiment tracking (`RunsSection`), and the packaged
 * script in JupyterLab's own read-only editor.
 */
import { CodeEditor, CodeEditorWrapper, IEditorServices } from '@jupyterlab/codeeditor';
import { Message } from '@lumino/messaging';
import { Panel, Widget } from '@lumino/widgets';

import { IJobDetail } from './api';
import { DETAILS_SECTIONS, IDetailsContext } from './detailsections';
import { JobDetailsModel } from './detailsmodel';
import { section } from './dom';
import { ResourcesModel } from './resources';
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

  /** Every section (`DETAILS_SECTIONS`) drawn afresh from the job. */
  private _render(job: IJobDetail): void {
    const context: IDetailsContext = { resources: this.resources, onStack: this._onStack };
    const root = document.createElement('div');
    for (const part of DETAILS_SECTIONS) {
      root.append(...part.render(job, context));
    }
    // a redraw (every few seconds while it runs) keeps the focused action focused
    const focused = document.activeElement as HTMLElement | null;
    const key = focused && this.node.contains(focused) ? focused.dataset.focusKey : undefined;
    this._info.node.replaceChildren(root);
    if (key) {
      root.querySelector<HTMLElement>(`[data-focus-key="${CSS.escape(key)}"]`)?.focus();
    }
  }

  private _onStack: ((replica: string) => void) | null;
  private _info: Widget;
  private _script: Widget | null = null;
}
