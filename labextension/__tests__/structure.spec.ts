/**
 * The lab extension's structure rules, like tests/test_complexity.py and tests/test_layers.py for
 * the Python side: no class over 300 lines, the views that have a model stay thin (their logic
 * belongs there), and the folders import one way: rest ← render ← models ← views ← plugins.
 */
import * as fs from 'fs';
import * as path from 'path';
import * as ts from 'typescript';

const SOURCES = path.resolve(__dirname, '..');
const MAX_CLASS_LINES = 300;
/** Tighter limits for views whose model took their logic (LogFeed, LogSelection). */
const VIEW_LIMITS: Record<string, number> = { LogViewer: 250 };

function sourceFiles(dir: string): string[] {
  const files: string[] = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory() && entry.name !== '__tests__') {
      files.push(...sourceFiles(full));
    } else if (entry.isFile() && entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) {
      files.push(full);
    }
  }
  return files;
}

/**
 * The folders (the root is '.') each folder's modules may import besides their own. The root's
 * modules other than `index.ts` (ids, icons, settings, the cell contract) import only the root;
 * `index.ts` lists the plugins and may import anything.
 */
const MAY_IMPORT: Record<string, string[]> = {
  rest: [],
  render: ['rest'],
  models: ['rest', 'render'],
  views: ['rest', 'render', 'models', '.'],
  plugins: ['rest', 'render', 'models', 'views', '.'],
  '.': ['schema']
};

/** `file → imported file` for each relative import of `file` that `MAY_IMPORT` forbids. */
function forbiddenImports(file: string): string[] {
  const from = path.relative(SOURCES, file);
  const folder = path.dirname(from);
  if (from === 'index.ts') {
    return [];
  }
  const text = fs.readFileSync(file, 'utf-8');
  const specs = [...text.matchAll(/from '(\.{1,2}\/[^']+)'/g)].map(m => m[1]);
  return specs
    .map(spec => path.relative(SOURCES, path.resolve(path.dirname(file), spec)))
    .filter(target => {
      const to = path.dirname(target).split(path.sep)[0];
      return to !== folder && !(MAY_IMPORT[folder] ?? []).includes(to);
    })
    .map(target => `${from} → ${target}`);
}

/** `[file:Class, lines]` of every class declared in `file`, nested ones included. */
function classSizes(file: string): [string, number][] {
  const text = fs.readFileSync(file, 'utf-8');
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const out: [string, number][] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isClassDeclaration(node) || ts.isClassExpression(node)) {
      const first = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
      const last = source.getLineAndCharacterOfPosition(node.getEnd()).line;
      out.push([`${path.basename(file)}:${node.name?.text ?? '(anonymous)'}`, last - first + 1]);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

describe('the lab extension sources', () => {
  const sizes = ([] as [string, number][]).concat(...sourceFiles(SOURCES).map(classSizes));

  it('are found (the check reads the real files)', () => {
    expect(sizes.map(([name]) => name)).toEqual(
      expect.arrayContaining(['logviewer.ts:LogViewer', 'logfeed.ts:LogFeed'])
    );
  });

  it('have no class over 300 lines', () => {
    expect(sizes.filter(([, lines]) => lines > MAX_CLASS_LINES)).toEqual([]);
  });

  it('import one way: rest, render, models, views, plugins', () => {
    const files = sourceFiles(SOURCES);
    expect(new Set(files.map(f => path.dirname(path.relative(SOURCES, f))))).toEqual(
      new Set(Object.keys(MAY_IMPORT))
    );
    expect(files.flatMap(forbiddenImports)).toEqual([]);
  });

  it('keep the views with a model thin', () => {
    const over = sizes.filter(([name, lines]) => {
      const limit = VIEW_LIMITS[name.split(':')[1]];
      return limit !== undefined && lines >= limit;
    });
    expect(over).toEqual([]);
  });
});
