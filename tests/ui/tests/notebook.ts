import { IJupyterLabPageFixture } from '@jupyterlab/galata';

/**
 * A notebook file (JSON) of code cells, for the browser tests to upload and run, with the kernel
 * ``kernel`` (a kernelspec's name).
 */
export function notebook(cells: string[], kernel = 'python3'): string {
  return JSON.stringify({
    cells: cells.map(source => ({
      cell_type: 'code',
      execution_count: null,
      metadata: {},
      outputs: [],
      source
    })),
    metadata: {
      kernelspec: {
        display_name: kernel === 'python3' ? 'Python 3 (ipykernel)' : kernel,
        language: 'python',
        name: kernel
      },
      language_info: { name: 'python' }
    },
    nbformat: 4,
    nbformat_minor: 5
  });
}

/** Upload ``cells`` as ``name`` under ``tmpPath``, open it and run all of it. */
export async function runCells(
  page: IJupyterLabPageFixture,
  tmpPath: string,
  name: string,
  cells: string[]
): Promise<boolean> {
  await page.contents.uploadContent(notebook(cells), 'text', `${tmpPath}/${name}`);
  await page.notebook.openByPath(`${tmpPath}/${name}`);
  await page.notebook.activate(name);
  return page.notebook.run();
}
