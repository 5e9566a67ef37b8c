// ESLint 9 flat config for the lab extension and its browser tests.
// Rules follow the JupyterLab extension template; prettier owns formatting, so
// eslint-config-prettier comes last among the shared configs to switch off the
// stylistic rules that would disagree with it.
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      '**/node_modules/',
      'lib/',
      'jupyter_disttrain/labextension/',
      'tests/ui/test-results/',
      'tests/ui/playwright-report/'
    ]
  },
  js.configs.recommended,
  tseslint.configs.recommended,
  prettier,
  {
    files: ['**/*.ts'],
    rules: {
      '@typescript-eslint/naming-convention': [
        'error',
        {
          selector: 'interface',
          format: ['PascalCase'],
          custom: { regex: '^I[A-Z]', match: true }
        }
      ],
      // Re-enabled after eslint-config-prettier: prettier would rewrite the
      // quotes anyway, this makes a wrong choice an error rather than a diff.
      quotes: ['error', 'single', { avoidEscape: true, allowTemplateLiterals: false }],
      curly: ['error', 'all'],
      eqeqeq: 'error',
      'prefer-arrow-callback': 'error'
    }
  }
);
