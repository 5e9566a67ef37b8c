/**
 * The click contract between the view under a `%%distrun` cell (jupyter_disttrain/notebook/contract.py)
 * and the lab: which elements the lab handles and what they ask for. contract.py declares the
 * same names; `__tests__/cellcontract.spec.ts` checks that the two agree.
 *
 * - HTML buttons carry `data-disttrain-command` (one of `CELL_COMMANDS`) and
 *   `data-disttrain-job` (the job id).
 * - The widget Cancel button carries the class `CELL_CANCEL_CLASS` and
 *   `CELL_JOB_CLASS_PREFIX + <job id>` (job ids are DNS labels, so valid class names).
 * - A rank's debugger prompt is an input of class `CELL_DEBUG_INPUT_CLASS` carrying
 *   `data-disttrain-job` and `CELL_REPLICA_ATTRIBUTE` (the rank): Enter sends its text as one
 *   pdb command.
 */
import { CommandIDs } from './ids';

export const CELL_COMMAND_ATTRIBUTE = 'data-disttrain-command';
export const CELL_JOB_ATTRIBUTE = 'data-disttrain-job';
export const CELL_CANCEL_CLASS = 'jp-DistTrain-cellCancel';
export const CELL_JOB_CLASS_PREFIX = 'jp-DistTrain-job-';
export const CELL_DEBUG_INPUT_CLASS = 'jp-DistTrain-debugInput';
export const CELL_REPLICA_ATTRIBUTE = 'data-disttrain-replica';
/** The commands a cell's HTML buttons may ask for. */
export const CELL_COMMANDS: readonly string[] = [
  CommandIDs.logs,
  CommandIDs.tensorboard,
  CommandIDs.details,
  CommandIDs.diagnose
];

/** The selector of every element of the contract (for `closest`). */
export const CELL_SELECTOR = `[${CELL_COMMAND_ATTRIBUTE}], .${CELL_CANCEL_CLASS}`;

/** The command an element under a %%distrun cell asks for, if it is one of ours. */
export function cellAction(el: Element): { command: string; id: string } | null {
  if (el.classList.contains(CELL_CANCEL_CLASS)) {
    const cls = Array.from(el.classList).find(c => c.startsWith(CELL_JOB_CLASS_PREFIX));
    const id = cls?.slice(CELL_JOB_CLASS_PREFIX.length);
    return id ? { command: CommandIDs.cancel, id } : null;
  }
  const command = el.getAttribute(CELL_COMMAND_ATTRIBUTE) ?? '';
  const id = el.getAttribute(CELL_JOB_ATTRIBUTE) ?? '';
  return CELL_COMMANDS.includes(command) && id ? { command, id } : null;
}

/** The job and rank whose prompt a debugger input answers, if `el` is one of ours. */
export function debugTarget(el: Element): { id: string; replica: string } | null {
  if (!el.classList.contains(CELL_DEBUG_INPUT_CLASS)) {
    return null;
  }
  const id = el.getAttribute(CELL_JOB_ATTRIBUTE) ?? '';
  const replica = el.getAttribute(CELL_REPLICA_ATTRIBUTE) ?? '';
  return id && replica ? { id, replica } : null;
}
