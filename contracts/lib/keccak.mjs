// Keccak-256 as Ethereum uses it (the original Keccak padding 0x01, not SHA3-256's 0x06).
// solc-js exposes no hash, and the build must not lean on a transitive dependency, so here it is:
// small and slow (BigInt lanes), which is fine for hashing a few dozen signatures.

const MASK = (1n << 64n) - 1n;

const ROUND_CONSTANTS = [
    0x0000000000000001n, 0x0000000000008082n, 0x800000000000808an, 0x8000000080008000n,
    0x000000000000808bn, 0x0000000080000001n, 0x8000000080008081n, 0x8000000000008009n,
    0x000000000000008an, 0x0000000000000088n, 0x0000000080008009n, 0x000000008000000an,
    0x000000008000808bn, 0x800000000000008bn, 0x8000000000008089n, 0x8000000000008003n,
    0x8000000000008002n, 0x8000000000000080n, 0x000000000000800an, 0x800000008000000an,
    0x8000000080008081n, 0x8000000000008080n, 0x0000000080000001n, 0x8000000080008008n,
];

// Rotation offsets r[x + 5y].
const ROTATIONS = [
    0, 1, 62, 28, 27,
    36, 44, 6, 55, 20,
    3, 10, 43, 25, 39,
    41, 45, 15, 21, 8,
    18, 2, 61, 56, 14,
];

const rotl = (v, n) => (n === 0 ? v : ((v << BigInt(n)) | (v >> BigInt(64 - n))) & MASK);

function keccakF(a) {
    for (const rc of ROUND_CONSTANTS) {
        // θ
        const c = [0, 1, 2, 3, 4].map((x) => a[x] ^ a[x + 5] ^ a[x + 10] ^ a[x + 15] ^ a[x + 20]);
        for (let x = 0; x < 5; x++) {
            const d = c[(x + 4) % 5] ^ rotl(c[(x + 1) % 5], 1);
            for (let y = 0; y < 25; y += 5) a[x + y] ^= d;
        }
        // ρ and π
        const b = new Array(25);
        for (let x = 0; x < 5; x++) {
            for (let y = 0; y < 5; y++) {
                b[y + 5 * ((2 * x + 3 * y) % 5)] = rotl(a[x + 5 * y], ROTATIONS[x + 5 * y]);
            }
        }
        // χ
        for (let y = 0; y < 25; y += 5) {
            for (let x = 0; x < 5; x++) {
                a[x + y] = b[x + y] ^ (~b[((x + 1) % 5) + y] & MASK & b[((x + 2) % 5) + y]);
            }
        }
        // ι
        a[0] ^= rc;
    }
}

/** Keccak-256 of a string (UTF-8) or bytes; returns 32 bytes. */
export function keccak256(input) {
    const data = typeof input === 'string' ? new TextEncoder().encode(input) : Uint8Array.from(input);
    const rate = 136; // bytes: 1600 - 2 * 256 bits
    const padded = new Uint8Array(Math.ceil((data.length + 1) / rate) * rate);
    padded.set(data);
    padded[data.length] ^= 0x01;
    padded[padded.length - 1] ^= 0x80;

    const state = new Array(25).fill(0n);
    for (let off = 0; off < padded.length; off += rate) {
        for (let i = 0; i < rate / 8; i++) {
            let lane = 0n;
            for (let k = 7; k >= 0; k--) lane = (lane << 8n) | BigInt(padded[off + 8 * i + k]);
            state[i] ^= lane;
        }
        keccakF(state);
    }
    const out = new Uint8Array(32);
    for (let i = 0; i < 4; i++) {
        for (let k = 0; k < 8; k++) out[8 * i + k] = Number((state[i] >> BigInt(8 * k)) & 0xffn);
    }
    return out;
}

/** Keccak-256 as 0x-prefixed hex. */
export function keccak256Hex(input) {
    return '0x' + Buffer.from(keccak256(input)).toString('hex');
}
