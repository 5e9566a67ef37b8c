import {
  cellAction,
  CELL_CANCEL_CLASS,
  CELL_COMMAND_ATTRIBUTE,
  CELL_JOB_ATTRIBUTE,
  CELL_JOB_CLASS_PREFIX
} from '../cellcontract';
import { CommandIDs } from '../ids';

/** Just what `cellAction` reads of an element: its classes and attributes. */
function element(classes: string[], attributes: Record<string, string> = {}): Element {
  const classList = Object.assign([...classes], { contains: (c: string) => classes.includes(c) });
  return { classList, getAttribute: (n: string) => attributes[n] ?? null } as unknown as Element;
}

// tests/test_cell_contract.py checks that widgets.py declares the same names.
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
