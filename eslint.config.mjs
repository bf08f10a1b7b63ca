// ESLint for the extension's TypeScript (vscode-client/): the recommended rules with type information.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'out/**', 'node_modules/**', 'tests/**', 'vscode-client/esbuild.mjs'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    files: ['vscode-client/**/*.ts'],
    languageOptions: {
      parserOptions: { project: './vscode-client/tsconfig.json', tsconfigRootDir: import.meta.dirname },
    },
  },
  {
    // node:test runs every top-level test() it is given, and the tests read package.json as plain JSON
    files: ['vscode-client/test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-floating-promises': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
    },
  },
);
