/**
 * The lab extension's size rules, like tests/test_complexity.py for the Python side: no class
 * over 300 lines, and the views that have a model stay thin (their logic belongs there).
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

  it('keep the views with a model thin', () => {
    const over = sizes.filter(([name, lines]) => {
      const limit = VIEW_LIMITS[name.split(':')[1]];
      return limit !== undefined && lines >= limit;
    });
    expect(over).toEqual([]);
  });
});
