// Bundles the extension (dist/extension.js) or the unit tests (out/test/*.test.js).
//   node vscode-client/esbuild.mjs [--production] [--watch] [--tests]
import * as esbuild from 'esbuild';
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = dirname(here);
const args = new Set(process.argv.slice(2));
const production = args.has('--production');

const common = {
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'cjs',
  external: ['vscode'],
  sourcemap: !production,
  minify: production,
  logLevel: 'warning',
  absWorkingDir: root,
};

const options = args.has('--tests')
  ? {
      ...common,
      entryPoints: readdirSync(join(here, 'test'))
        .filter((f) => f.endsWith('.test.ts'))
        .map((f) => join(here, 'test', f)),
      outdir: join(root, 'out', 'test'),
      sourcemap: 'inline',
    }
  : {
      ...common,
      entryPoints: [join(here, 'src', 'extension.ts')],
      outfile: join(root, 'dist', 'extension.js'),
      mainFields: ['module', 'main'],
    };

if (args.has('--watch')) {
  const ctx = await esbuild.context(options);
  await ctx.watch();
  console.log('esbuild: watching');
} else {
  await esbuild.build(options);
}
