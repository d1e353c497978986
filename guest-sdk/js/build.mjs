// Builds one JavaScript function into a WebAssembly component with componentize-js; run
// by `cargo xtask build-functions` (xtask/src/js_functions.rs), with node:
//
//   node build.mjs <node_modules> <wit dir> <world> <function dir> <out.wasm>
//
// <node_modules> is where `npm ci` installed this directory's package-lock.json. The
// function's directory is copied into a scratch directory with the SDK beside its
// `app.js` (`sluice_guest/`, and the file `sluice-guest` re-exporting it), so that
// `import … from 'sluice-guest'` resolves as StarlingMonkey resolves module names: as a
// path relative to the importing module. Wizer then runs the module's top level once
// and snapshots it (no AOT compilation: weval would download a binary).
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const [nodeModules, witDir, world, functionDir, out] = process.argv.slice(2);
if (!out) {
  console.error('usage: node build.mjs <node_modules> <wit dir> <world> <function dir> <out.wasm>');
  process.exit(2);
}
const sdk = join(dirname(fileURLToPath(import.meta.url)), 'sluice_guest');
const componentizeJs = join(resolve(nodeModules), '@bytecodealliance/componentize-js/src/componentize.js');
const { componentize } = await import(pathToFileURL(componentizeJs).href);

const stage = mkdtempSync(join(tmpdir(), 'sluice-js-'));
try {
  cpSync(resolve(functionDir), stage, { recursive: true });
  cpSync(sdk, join(stage, 'sluice_guest'), { recursive: true });
  writeFileSync(join(stage, 'sluice-guest'), "export * from './sluice_guest/index.js';\n");
  // Paths in the snapshot (and in error messages) are relative to the scratch directory.
  process.chdir(stage);
  const { component } = await componentize({
    sourcePath: join(stage, 'app.js'),
    witPath: resolve(witDir),
    worldName: world,
    // No WASI clocks, randomness or HTTP: a sluice guest gets none (stdio stays, for
    // console.log and uncaught errors, which the host captures).
    disableFeatures: ['random', 'clocks', 'http', 'fetch-event'],
  });
  writeFileSync(resolve(out), component);
} finally {
  process.chdir(tmpdir());
  rmSync(stage, { recursive: true, force: true });
}
