import { setTensorBoardLook, TB_SETTINGS_KEY } from '../views/tblook';

/** A Storage over a Map, as the browser's localStorage behaves for these calls. */
function storage(initial: Record<string, string> = {}): Storage {
  const items = new Map(Object.entries(initial));
  return {
    get length() {
      return items.size;
    },
    clear: () => items.clear(),
    getItem: (key: string) => items.get(key) ?? null,
    key: (i: number) => [...items.keys()][i] ?? null,
    removeItem: (key: string) => void items.delete(key),
    setItem: (key: string, value: string) => void items.set(key, value)
  };
}

const read = (s: Storage) => JSON.parse(s.getItem(TB_SETTINGS_KEY)!);

describe('setTensorBoardLook', () => {
  it('sets the theme and closes the settings pane on a first visit', () => {
    const s = storage();
    setTensorBoardLook(true, s);
    expect(read(s)).toEqual({ theme: 'dark', timeSeriesSettingsPaneOpened: false });
    setTensorBoardLook(false, s);
    expect(read(s).theme).toBe('light');
  });

  it("keeps TensorBoard's other settings and the user's choice of the pane", () => {
    const s = storage({
      [TB_SETTINGS_KEY]: JSON.stringify({
        scalarSmoothing: 0.3,
        timeSeriesSettingsPaneOpened: true
      })
    });
    setTensorBoardLook(true, s);
    expect(read(s)).toEqual({
      scalarSmoothing: 0.3,
      timeSeriesSettingsPaneOpened: true,
      theme: 'dark'
    });
  });

  it('starts afresh from what is not its JSON', () => {
    const s = storage({ [TB_SETTINGS_KEY]: '[1, 2' });
    setTensorBoardLook(false, s);
    expect(read(s)).toEqual({ theme: 'light', timeSeriesSettingsPaneOpened: false });
  });
});
