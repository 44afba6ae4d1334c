// A minimal EVM client for the smoke test: starts anvil, speaks JSON-RPC with fetch, encodes and
// decodes the few ABI types the token uses. Node built-ins only, on purpose (no ethers/viem).

import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const contractsDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The anvil binary: TOKENOPS_TEST_ANVIL, else the one the npm package ships. */
export function anvilPath() {
    const fromEnv = process.env.TOKENOPS_TEST_ANVIL;
    if (fromEnv) return fromEnv;
    const shipped = join(contractsDir, 'node_modules', '@foundry-rs', 'anvil-linux-amd64', 'bin', 'anvil');
    if (!existsSync(shipped)) {
        throw new Error(`anvil not found at ${shipped}: run npm --prefix contracts ci`);
    }
    return shipped;
}

/**
 * Starts anvil on a free loopback port (port 0: anvil picks one and prints it, so there is no
 * race with another process over the port). Resolves to { url, stop }.
 */
export function startAnvil({ timeoutMs = 20_000 } = {}) {
    const child = spawn(anvilPath(), ['--host', '127.0.0.1', '--port', '0', '--accounts', '6'], {
        stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const stop = () =>
        new Promise((done) => {
            if (child.exitCode !== null || child.signalCode !== null) return done();
            child.once('exit', () => done());
            child.kill('SIGTERM');
        });
    return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
            child.kill('SIGKILL');
            reject(new Error(`anvil did not start within ${timeoutMs} ms; it said:\n${output}`));
        }, timeoutMs);
        const onData = (chunk) => {
            output += chunk;
            const m = /Listening on (127\.0\.0\.1:\d+)/.exec(output);
            if (m) {
                clearTimeout(timer);
                child.stdout.off('data', onData);
                child.stdout.resume(); // keep draining so anvil never blocks on a full pipe
                resolve({ url: `http://${m[1]}`, stop });
            }
        };
        child.stdout.setEncoding('utf8').on('data', onData);
        child.stderr.setEncoding('utf8').on('data', (chunk) => (output += chunk));
        child.once('error', (err) => {
            clearTimeout(timer);
            reject(err);
        });
        child.once('exit', (code, signal) => {
            clearTimeout(timer);
            reject(new Error(`anvil exited early (${code ?? signal}); it said:\n${output}`));
        });
    });
}

/** A JSON-RPC error, with the node's `data` (revert data for a reverted call). */
export class RpcError extends Error {
    constructor(method, error) {
        super(`${method}: ${error.message} (code ${error.code})`);
        this.code = error.code;
        this.data = error.data;
    }
}

export function rpcClient(url, { timeoutMs = 10_000 } = {}) {
    let nextId = 1;
    return async function rpc(method, params = []) {
        const res = await fetch(url, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, params }),
            signal: AbortSignal.timeout(timeoutMs),
        });
        if (!res.ok) throw new Error(`${method}: HTTP ${res.status} ${await res.text()}`);
        const body = await res.json();
        if (body.error) throw new RpcError(method, body.error);
        return body.result;
    };
}

// ---- ABI: only what the token's interface needs ----

const word = (hex) => hex.padStart(64, '0');
const strip = (hex) => (hex.startsWith('0x') ? hex.slice(2) : hex);

function encodeStatic(type, value) {
    if (type === 'address') return word(strip(value).toLowerCase());
    if (type === 'bytes32') return strip(value).padEnd(64, '0');
    if (/^uint\d+$/.test(type)) {
        const v = BigInt(value);
        if (v < 0n) throw new Error(`negative ${type}`);
        return word(v.toString(16));
    }
    if (type === 'bool') return word(value ? '1' : '0');
    throw new Error(`unsupported ABI type ${type}`);
}

/** ABI-encodes arguments (static types and `string`), as hex without 0x. */
export function encodeArgs(types, values) {
    let head = '';
    let tail = '';
    const headSize = 32 * types.length;
    types.forEach((type, i) => {
        if (type === 'string') {
            const bytes = Buffer.from(values[i], 'utf8');
            head += word((headSize + tail.length / 2).toString(16));
            tail += word(bytes.length.toString(16)) + bytes.toString('hex').padEnd(Math.ceil(bytes.length / 32) * 64, '0');
        } else {
            head += encodeStatic(type, values[i]);
        }
    });
    return head + tail;
}

/** Decodes static words: uint* → BigInt, address → lowercase 0x…, bytes32 → 0x…. */
export function decodeWords(types, hex) {
    const data = strip(hex);
    return types.map((type, i) => {
        const w = data.slice(64 * i, 64 * (i + 1));
        if (w.length !== 64) throw new Error(`short return data for ${types.join(',')}: 0x${data}`);
        if (type === 'address') return `0x${w.slice(24)}`;
        if (type === 'bytes32') return `0x${w}`;
        if (/^uint\d+$/.test(type)) return BigInt(`0x${w}`);
        if (type === 'bool') return BigInt(`0x${w}`) !== 0n;
        throw new Error(`unsupported ABI type ${type}`);
    });
}

/** Splits a signature `name(t1,t2)` into its argument types (no tuples needed here). */
export function argTypes(signature) {
    const inner = signature.slice(signature.indexOf('(') + 1, -1);
    return inner === '' ? [] : inner.split(',');
}
