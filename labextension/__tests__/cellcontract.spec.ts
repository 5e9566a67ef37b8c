import {
  cellAction,
  CELL_CANCEL_CLASS,
  CELL_COMMAND_ATTRIBUTE,
  CELL_DEBUG_INPUT_CLASS,
  CELL_JOB_ATTRIBUTE,
  CELL_JOB_CLASS_PREFIX,
  CELL_REPLICA_ATTRIBUTE,
  debugTarget
} from '../cellcontract';
import { CommandIDs } from '../ids';

/** Just what `cellAction` reads of an element: its classes and attributes. */
function element(classes: string[], attributes: Record<string, string> = {}): Element {
  const classList = Object.assign([...classes], { contains: (c: string) => classes.includes(c) });
  return { classList, getAttribute: (n: string) => attributes[n] ?? null } as unknown as Element;
}

// tests/test_cell_contract.py checks that notebook/contract.py declares the same names.
describe('the cell widget <-> lab click contract', () => {
  it('maps the buttons to commands and ignores anything else', () => {
    const job = 'mnist-ddp-k3x9q';
    const button = (command: string) =>
      element([], { [CELL_COMMAND_ATTRIBUTE]: command, [CELL_JOB_ATTRIBUTE]: job });
    expect(cellAction(button(CommandIDs.logs))).toEqual({ command: CommandIDs.logs, id: job });
    expect(cellAction(button(CommandIDs.remove))).toBeNull(); // not for cells
    expect(cellAction(element([CELL_CANCEL_CLASS, CELL_JOB_CLASS_PREFIX + job]))).toEqual({
      command: CommandIDs.cancel,
      id: job
    });
    expect(cellAction(element([CELL_CANCEL_CLASS]))).toBeNull(); // no job class
  });
});

// tests/test_debug_view.py checks that notebook/contract.py declares the same names.
describe('the debugger input of a cell', () => {
  it('names the job and the rank whose prompt it answers', () => {
    const attrs = { [CELL_JOB_ATTRIBUTE]: 'pdb-k3x9q', [CELL_REPLICA_ATTRIBUTE]: 'rank-1' };
    expect(debugTarget(element([CELL_DEBUG_INPUT_CLASS], attrs))).toEqual({
      id: 'pdb-k3x9q',
      replica: 'rank-1'
    });
    expect(debugTarget(element([], attrs))).toBeNull(); // any other input
    expect(
      debugTarget(element([CELL_DEBUG_INPUT_CLASS], { [CELL_JOB_ATTRIBUTE]: 'x' }))
    ).toBeNull();
  });
});
