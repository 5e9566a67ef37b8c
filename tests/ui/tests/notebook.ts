/** A notebook file (JSON) of code cells, for the browser tests to upload and run. */
export function notebook(cells: string[]): string {
  return JSON.stringify({
    cells: cells.map(source => ({
      cell_type: 'code',
      execution_count: null,
      metadata: {},
      outputs: [],
      source
    })),
    metadata: {
      kernelspec: { display_name: 'Python 3 (ipykernel)', language: 'python', name: 'python3' },
      language_info: { name: 'python' }
    },
    nbformat: 4,
    nbformat_minor: 5
  });
}
