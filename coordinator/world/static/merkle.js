// Payout proofs, checked in the browser: keccak-256 and SHA-256 written out here (Web Crypto
// has no keccak and needs a secure context), the leaf encoding and pair rule of
// ledger/merkle.py, and the fold from a leaf up to a root.

const MASK64 = (1n << 64n) - 1n;

function roundConstants() {
  // The rc(t) bits of the Keccak LFSR (x^8 + x^6 + x^5 + x^4 + 1), packed into 24 lane constants.
  const bit = (t) => {
    let register = 1;
    for (let i = 0; i < t % 255; i++) {
      register <<= 1;
      if (register & 0x100) register ^= 0x171;
    }
    return BigInt(register & 1);
  };
  const constants = [];
  for (let round = 0; round < 24; round++) {
    let value = 0n;
    for (let j = 0; j < 7; j++) value |= bit(j + 7 * round) << BigInt((1 << j) - 1);
    constants.push(value);
  }
  return constants;
}

function rotationOffsets() {
  const offsets = new Array(25).fill(0);
  let x = 1;
  let y = 0;
  for (let t = 0; t < 24; t++) {
    offsets[x + 5 * y] = (((t + 1) * (t + 2)) / 2) % 64;
    [x, y] = [y, (2 * x + 3 * y) % 5];
  }
  return offsets;
}

const ROUND_CONSTANTS = roundConstants();
const ROTATIONS = rotationOffsets();

function rotl(value, shift) {
  if (shift === 0) return value;
  const n = BigInt(shift);
  return ((value << n) | (value >> (64n - n))) & MASK64;
}

function keccakF(state) {
  const c = new Array(5);
  const b = new Array(25);
  for (let round = 0; round < 24; round++) {
    for (let x = 0; x < 5; x++) c[x] = state[x] ^ state[x + 5] ^ state[x + 10] ^ state[x + 15] ^ state[x + 20];
    for (let x = 0; x < 5; x++) {
      const d = c[(x + 4) % 5] ^ rotl(c[(x + 1) % 5], 1);
      for (let y = 0; y < 25; y += 5) state[x + y] ^= d;
    }
    for (let x = 0; x < 5; x++) {
      for (let y = 0; y < 5; y++) b[y + 5 * ((2 * x + 3 * y) % 5)] = rotl(state[x + 5 * y], ROTATIONS[x + 5 * y]);
    }
    for (let y = 0; y < 25; y += 5) {
      for (let x = 0; x < 5; x++) state[x + y] = b[x + y] ^ (~b[((x + 1) % 5) + y] & MASK64 & b[((x + 2) % 5) + y]);
    }
    state[0] ^= ROUND_CONSTANTS[round];
  }
}

export function keccak256(bytes) {
  const rate = 136;
  const padded = new Uint8Array((Math.floor(bytes.length / rate) + 1) * rate);
  padded.set(bytes);
  padded[bytes.length] ^= 0x01; // Keccak's own padding (Ethereum's keccak256), not SHA-3's 0x06
  padded[padded.length - 1] ^= 0x80;
  const state = new Array(25).fill(0n);
  for (let offset = 0; offset < padded.length; offset += rate) {
    for (let lane = 0; lane < rate / 8; lane++) {
      let value = 0n;
      for (let i = 7; i >= 0; i--) value = (value << 8n) | BigInt(padded[offset + lane * 8 + i]);
      state[lane] ^= value;
    }
    keccakF(state);
  }
  const out = new Uint8Array(32);
  for (let lane = 0; lane < 4; lane++) {
    let value = state[lane];
    for (let i = 0; i < 8; i++) {
      out[lane * 8 + i] = Number(value & 0xffn);
      value >>= 8n;
    }
  }
  return out;
}

const SHA256_K = (() => {
  // The first 32 bits of the fractional parts of the cube roots of the first 64 primes.
  const primes = [];
  for (let n = 2; primes.length < 64; n++) if (primes.every((p) => n % p !== 0)) primes.push(n);
  return Uint32Array.from(primes, (p) => Math.floor((Math.cbrt(p) % 1) * 2 ** 32));
})();
const SHA256_H0 = (() => {
  const primes = [2, 3, 5, 7, 11, 13, 17, 19];
  return Uint32Array.from(primes, (p) => Math.floor((Math.sqrt(p) % 1) * 2 ** 32));
})();

export function sha256(bytes) {
  const bitLength = BigInt(bytes.length) * 8n;
  const padded = new Uint8Array(Math.ceil((bytes.length + 9) / 64) * 64);
  padded.set(bytes);
  padded[bytes.length] = 0x80;
  for (let i = 0; i < 8; i++) padded[padded.length - 1 - i] = Number((bitLength >> BigInt(8 * i)) & 0xffn);
  const hash = Uint32Array.from(SHA256_H0);
  const w = new Uint32Array(64);
  const rotr = (x, n) => (x >>> n) | (x << (32 - n));
  for (let offset = 0; offset < padded.length; offset += 64) {
    for (let i = 0; i < 16; i++) {
      const j = offset + i * 4;
      w[i] = (padded[j] << 24) | (padded[j + 1] << 16) | (padded[j + 2] << 8) | padded[j + 3];
    }
    for (let i = 16; i < 64; i++) {
      const s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >>> 3);
      const s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >>> 10);
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) >>> 0;
    }
    let [a, b, c, d, e, f, g, k] = hash;
    for (let i = 0; i < 64; i++) {
      const t1 = (k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + SHA256_K[i] + w[i]) >>> 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) >>> 0;
      [k, g, f, e, d, c, b, a] = [g, f, e, (d + t1) >>> 0, c, b, a, (t1 + t2) >>> 0];
    }
    [a, b, c, d, e, f, g, k].forEach((value, i) => { hash[i] = (hash[i] + value) >>> 0; });
  }
  const out = new Uint8Array(32);
  hash.forEach((value, i) => { out[i * 4] = value >>> 24; out[i * 4 + 1] = value >>> 16; out[i * 4 + 2] = value >>> 8; out[i * 4 + 3] = value; });
  return out;
}

export const HASHES = { keccak256, sha256 };

export function toHex(bytes) {
  return "0x" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function fromHex(text, length = null) {
  const body = String(text).trim().replace(/^0x/i, "");
  if (!/^([0-9a-fA-F]{2})*$/.test(body)) throw new Error(`not hex: ${String(text).slice(0, 20)}`);
  if (length !== null && body.length !== length * 2) throw new Error(`expected ${length} bytes, got ${body.length / 2}`);
  return Uint8Array.from(body.match(/../g) || [], (pair) => parseInt(pair, 16));
}

function uint256(value) {
  let number = BigInt(value);
  if (number < 0n || number >= 1n << 256n) throw new Error("a uint256 must be 0 .. 2^256-1");
  const out = new Uint8Array(32);
  for (let i = 31; i >= 0; i--) {
    out[i] = Number(number & 0xffn);
    number >>= 8n;
  }
  return out;
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

function compareBytes(a, b) {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}

// The encodings this page knows, by the exact name the API gives (coordinator/world/earnings.py).
export const LEAF_ENCODINGS = {
  "keccak256(keccak256(abi.encode(uint256 epoch, address account, uint256 amount)))": (hash, leaf) => {
    const address = fromHex(leaf.address, 20);
    const encoded = concat(uint256(leaf.epoch), concat(new Uint8Array(12), address), uint256(leaf.amount));
    return hash(hash(encoded));
  },
};

export function pairHash(hash, a, b) {
  return compareBytes(a, b) <= 0 ? hash(concat(a, b)) : hash(concat(b, a));
}

// Recompute the leaf from its fields, fold the proof, and compare with the root.
// Returns {ok, leaf, computedRoot, problem}; never throws on bad input.
export function verifyProof({ hashName, leafEncoding, leaf, proof, root }) {
  try {
    const hash = HASHES[hashName];
    if (!hash) return { ok: false, problem: `unknown hash ${hashName}` };
    const encode = LEAF_ENCODINGS[leafEncoding];
    if (!encode) return { ok: false, problem: `unknown leaf encoding ${leafEncoding}` };
    const leafHash = encode(hash, leaf);
    let computed = leafHash;
    for (const sibling of proof) computed = pairHash(hash, computed, fromHex(sibling, 32));
    const expected = fromHex(root, 32);
    const ok = compareBytes(computed, expected) === 0;
    return { ok, leaf: toHex(leafHash), computedRoot: toHex(computed),
      problem: ok ? "" : "the proof does not lead to the root" };
  } catch (error) {
    return { ok: false, problem: error.message };
  }
}
