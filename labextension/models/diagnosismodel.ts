/**
 * A job's diagnoses for its details: the Diagnose action (which rank is stuck, in which
 * collective, at which cell line) and the newest incident read in full when the details list a
 * new one (the guard's automatic ones too).
 */
import { ISignal, Signal } from '@lumino/signaling';

import { diagnoseJob, getIncident, IIncident, IJobDetail } from '../rest/client';

export interface IDiagnosisOptions {
  jobId: string;
  diagnose?: (id: string) => Promise<IIncident>;
  fetchIncident?: (id: string, name: string) => Promise<IIncident>;
}

/** The job's newest diagnosis in full, and the Diagnose action's state. */
export class DiagnosisModel {
  constructor(options: IDiagnosisOptions) {
    this.jobId = options.jobId;
    this._diagnose = options.diagnose ?? diagnoseJob;
    this._fetch = options.fetchIncident ?? getIncident;
  }

  readonly jobId: string;

  /** The newest incident (null before there is one, or while it is read). */
  get incident(): IIncident | null {
    return this._incident;
  }

  /** Whether a diagnosis is being made. */
  get busy(): boolean {
    return this._busy;
  }

  /** Why the last diagnosis could not be made (null after a success). */
  get error(): string | null {
    return this._error;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Ask for a diagnosis now. */
  async diagnose(): Promise<void> {
    this._busy = true;
    this._error = null;
    this._changed.emit();
    try {
      this._incident = await this._diagnose(this.jobId);
    } catch (err) {
      this._error = err instanceof Error ? err.message : String(err);
    }
    this._busy = false;
    this._changed.emit();
  }

  /** Read the newest incident the details list when it is another than the one shown. */
  follow(job: IJobDetail): void {
    const newest = job.incidents?.[0]?.name;
    if (!newest || newest === this._incident?.name || newest === this._reading) {
      return;
    }
    this._reading = newest;
    void this._fetch(this.jobId, newest)
      .then(incident => {
        this._incident = incident;
        this._changed.emit();
      })
      .catch(() => undefined) // the next listing tries again
      .finally(() => {
        this._reading = null;
      });
  }

  dispose(): void {
    Signal.clearData(this);
  }

  private _diagnose: (id: string) => Promise<IIncident>;
  private _fetch: (id: string, name: string) => Promise<IIncident>;
  private _incident: IIncident | null = null;
  private _busy = false;
  private _error: string | null = null;
  private _reading: string | null = null;
  private _changed = new Signal<this, void>(this);
}
