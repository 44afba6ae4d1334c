// Compiles src/TokenopsToken.sol with solc-js and writes the artifact the Rust ledger crate embeds:
//   crates/tokenops-ledger/contracts/TokenopsToken.json
// Run it with `npm --prefix contracts run build` (after `npm --prefix contracts ci`).
// `node build.mjs --check` writes nothing and fails if the committed artifact differs from what
// the sources compile to (the test command runs it, so a contract edited without a rebuild fails).
// Any compiler error, an unresolvable import, or a selector that does not check out fails the
// build with a non-zero exit. The output is deterministic: rebuilding unchanged sources with the
// pinned compiler gives the same file byte for byte.

import { mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import solc from 'solc';
import { keccak256Hex } from './lib/keccak.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const CONTRACT = 'TokenopsToken';
const SOURCE = `src/${CONTRACT}.sol`;
const OUT = resolve(here, '..', 'crates', 'tokenops-ledger', 'contracts', `${CONTRACT}.json`);

const settings = {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: 'shanghai',
    outputSelection: {
        [SOURCE]: {
            [CONTRACT]: [
                'abi', 'evm.bytecode.object', 'evm.deployedBytecode.object',
                'evm.deployedBytecode.immutableReferences', 'evm.methodIdentifiers',
            ],
        },
    },
};

function fail(message) {
    console.error(`build: ${message}`);
    process.exit(1);
}

/** Resolves `@openzeppelin/...` (and any other package path) from node_modules only. */
function findImports(path) {
    const modules = join(here, 'node_modules');
    const file = resolve(modules, path);
    if (!file.startsWith(modules + sep)) return { error: `import outside node_modules refused: ${path}` };
    if (!existsSync(file)) {
        return { error: `cannot find ${path} in ${modules} (run: npm --prefix contracts ci)` };
    }
    return { contents: readFileSync(file, 'utf8') };
}

/** The canonical ABI type of a parameter, tuples expanded, as signatures are hashed. */
function canonicalType(param) {
    if (!param.type.startsWith('tuple')) return param.type;
    return `(${param.components.map(canonicalType).join(',')})${param.type.slice('tuple'.length)}`;
}

const signature = (item) => `${item.name}(${item.inputs.map(canonicalType).join(',')})`;

function selectorsOf(abi, kind, length) {
    const entries = abi
        .filter((item) => item.type === kind)
        .map((item) => [signature(item), keccak256Hex(signature(item)).slice(0, 2 + 2 * length)])
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return Object.fromEntries(entries);
}

const input = {
    language: 'Solidity',
    sources: { [SOURCE]: { content: readFileSync(join(here, SOURCE), 'utf8') } },
    settings,
};

const started = Date.now();
const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
const diagnostics = output.errors ?? [];
for (const d of diagnostics) console.error(d.formattedMessage ?? d.message);
const errors = diagnostics.filter((d) => d.severity === 'error');
if (errors.length > 0) fail(`${errors.length} compiler error(s), no artifact written`);

const compiled = output.contracts?.[SOURCE]?.[CONTRACT];
if (!compiled) fail(`no output for ${SOURCE}:${CONTRACT}`);
const bytecode = compiled.evm.bytecode.object;
const deployedBytecode = compiled.evm.deployedBytecode.object;
if (!bytecode || !deployedBytecode) fail('empty bytecode');
if (/__\$[0-9a-f]{34}\$__/.test(bytecode)) fail('bytecode has unlinked library references');

// Function selectors are hashed here like the error selectors, and must agree with the compiler's
// own method identifiers: that checks the keccak implementation on every build.
const functionSelectors = selectorsOf(compiled.abi, 'function', 4);
const fromCompiler = Object.fromEntries(
    Object.entries(compiled.evm.methodIdentifiers).map(([sig, sel]) => [sig, `0x${sel}`]),
);
if (JSON.stringify(Object.keys(functionSelectors)) !== JSON.stringify(Object.keys(fromCompiler).sort())) {
    fail('the ABI functions and the compiler method identifiers differ');
}
for (const [sig, sel] of Object.entries(functionSelectors)) {
    if (fromCompiler[sig] !== sel) fail(`selector of ${sig}: keccak gives ${sel}, solc gives ${fromCompiler[sig]}`);
}

const artifact = {
    contractName: CONTRACT,
    sourceName: SOURCE,
    abi: compiled.abi,
    bytecode: `0x${bytecode}`,
    // The runtime code as compiled: the constructor fills the immutables (issuer, decimals) in,
    // so the code on chain differs from this at these byte ranges (AST id → [{start, length}]).
    deployedBytecode: `0x${deployedBytecode}`,
    immutableReferences: compiled.evm.deployedBytecode.immutableReferences ?? {},
    functionSelectors,
    errorSelectors: selectorsOf(compiled.abi, 'error', 4),
    eventTopics: selectorsOf(compiled.abi, 'event', 32),
    compiler: {
        version: solc.version(),
        settings: { optimizer: settings.optimizer, evmVersion: settings.evmVersion },
    },
};

const text = `${JSON.stringify(artifact, null, 2)}\n`;
if (process.argv.includes('--check')) {
    const committed = existsSync(OUT) ? readFileSync(OUT, 'utf8') : '';
    if (committed !== text) {
        fail(`${relative(process.cwd(), OUT)} is not what ${SOURCE} compiles to: run npm --prefix contracts run build`);
    }
    console.log(`build: ${relative(process.cwd(), OUT)} is up to date (${Date.now() - started} ms)`);
    process.exit(0);
}
mkdirSync(dirname(OUT), { recursive: true });
writeFileSync(OUT, text);
console.log(
    `build: wrote ${relative(process.cwd(), OUT)} (solc ${solc.version()}, ` +
        `${(bytecode.length / 2).toLocaleString('en')} bytes of creation code, ${Date.now() - started} ms)`,
);
