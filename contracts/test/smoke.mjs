// Smoke test of TokenopsToken against a real anvil: deploys the built artifact and walks through
// mint, transfer, the three ways a hold ends, expiry and burn, checking every refusal by its
// custom error and, after each step, that total = available + held for every account.
// Run: npm --prefix contracts test (after npm --prefix contracts run build).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { RpcError, argTypes, decodeWords, encodeArgs, rpcClient, startAnvil } from './lib/evm.mjs';

const ARTIFACT = join(
    dirname(fileURLToPath(import.meta.url)),
    '..', '..', 'crates', 'tokenops-ledger', 'contracts', 'TokenopsToken.json',
);
const art = JSON.parse(readFileSync(ARTIFACT, 'utf8'));

const HoldStatus = { None: 0n, Active: 1n, Executed: 2n, Cancelled: 3n };
const ZERO = `0x${'0'.repeat(40)}`;
const holdId = (name) => `0x${Buffer.from(name, 'utf8').toString('hex').padEnd(64, '0')}`;
const hex = (n) => `0x${BigInt(n).toString(16)}`;

let anvil;
let rpc;
let token; // contract address
let issuer, alice, bob, carol, stranger;

function calldata(signature, args = []) {
    const selector = art.functionSelectors[signature];
    assert.ok(selector, `no function ${signature} in the artifact`);
    return selector + encodeArgs(argTypes(signature), args);
}

async function receiptOf(txHash, timeoutMs = 10_000) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
        const receipt = await rpc('eth_getTransactionReceipt', [txHash]);
        if (receipt) return receipt;
        if (Date.now() > deadline) throw new Error(`no receipt for ${txHash} within ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 50));
    }
}

/** Sends a transaction from an unlocked dev account and requires it to succeed. */
async function send(from, signature, args = []) {
    const tx = { from, to: token, data: calldata(signature, args) };
    const receipt = await receiptOf(await rpc('eth_sendTransaction', [tx]));
    assert.equal(receipt.status, '0x1', `${signature} from ${from} failed`);
    return receipt;
}

async function view(signature, args, outTypes) {
    return decodeWords(outTypes, await rpc('eth_call', [{ to: token, data: calldata(signature, args) }, 'latest']));
}

/** The revert data of a JSON-RPC error, as anvil reports it. */
function revertData(err) {
    assert.ok(err instanceof RpcError, `expected a revert, got ${err}`);
    const data = typeof err.data === 'string' ? err.data : err.data?.data;
    assert.match(String(data), /^0x[0-9a-f]{8}/, `no revert data in ${err.message}`);
    return data;
}

/** Decodes revert data into [error signature, args], by the artifact's error selectors. */
function decodeError(data) {
    const entry = Object.entries(art.errorSelectors).find(([, sel]) => data.startsWith(sel));
    assert.ok(entry, `unknown error selector ${data.slice(0, 10)}`);
    const [signature] = entry;
    return [signature, decodeWords(argTypes(signature), data.slice(10))];
}

/** `eth_call`s the transaction and requires it to revert with exactly this custom error. */
async function expectRevert(from, signature, args, errorSignature, errorArgs) {
    const tx = { from, to: token, data: calldata(signature, args) };
    const err = await rpc('eth_call', [tx, 'latest']).then(
        (result) => assert.fail(`${signature} did not revert (returned ${result})`),
        (e) => e,
    );
    const [name, decoded] = decodeError(revertData(err));
    assert.equal(name, errorSignature, `${signature} reverted with ${name}`);
    if (errorArgs) assert.deepEqual(decoded, errorArgs.map(normalise));
}

const normalise = (v) => (typeof v === 'string' ? v.toLowerCase() : BigInt(v));

async function balances(account) {
    const [total] = await view('balanceOf(address)', [account], ['uint256']);
    const [available] = await view('availableBalanceOf(address)', [account], ['uint256']);
    const [held] = await view('heldBalanceOf(address)', [account], ['uint256']);
    return { total, available, held };
}

/** total = available + held for everyone, and the totals add up to the supply. */
async function checkInvariant() {
    let sum = 0n;
    for (const account of [issuer, alice, bob, carol, stranger]) {
        const b = await balances(account);
        assert.equal(b.total, b.available + b.held, `total ≠ available + held for ${account}`);
        sum += b.total;
    }
    const [supply] = await view('totalSupply()', [], ['uint256']);
    assert.equal(sum, supply, 'balances do not add up to the total supply');
}

async function expectBalances(account, total, available, held) {
    assert.deepEqual(await balances(account), { total: BigInt(total), available: BigInt(available), held: BigInt(held) });
    await checkInvariant();
}

async function holdOf(id) {
    const [owner, payee, amount, expiresAt, status] = await view('holdOf(bytes32)', [id], [
        'address', 'address', 'uint256', 'uint64', 'uint8',
    ]);
    return { owner, payee, amount, expiresAt, status };
}

async function latestTimestamp() {
    return BigInt((await rpc('eth_getBlockByNumber', ['latest', false])).timestamp);
}

function logsWithTopic(receipt, eventSignature) {
    const topic = art.eventTopics[eventSignature];
    assert.ok(topic, `no event ${eventSignature} in the artifact`);
    return receipt.logs.filter((log) => log.topics[0] === topic);
}

const topicAddress = (address) => `0x${address.slice(2).toLowerCase().padStart(64, '0')}`;

describe('TokenopsToken on anvil', () => {
    before(async () => {
        anvil = await startAnvil();
        rpc = rpcClient(anvil.url);
        [issuer, alice, bob, carol, stranger] = (await rpc('eth_accounts')).map((a) => a.toLowerCase());

        const data = art.bytecode + encodeArgs(['string', 'string', 'uint8', 'address'], ['Euro token', 'EURT', 2, issuer]);
        const receipt = await receiptOf(await rpc('eth_sendTransaction', [{ from: issuer, data }]));
        assert.equal(receipt.status, '0x1', 'deployment failed');
        token = receipt.contractAddress;
    });

    after(async () => {
        await anvil?.stop();
    });

    it('deploys with the currency minor unit as decimals and the issuer key', async () => {
        // The code on chain is the artifact's runtime code with the immutables filled in.
        const onChain = Buffer.from((await rpc('eth_getCode', [token, 'latest'])).slice(2), 'hex');
        const refs = Object.values(art.immutableReferences).flat();
        assert.equal(refs.length > 0, true);
        for (const { start, length } of refs) onChain.fill(0, start, start + length);
        assert.ok(`0x${onChain.toString('hex')}` === art.deployedBytecode, 'code on chain differs from the artifact');
        assert.deepEqual(await view('decimals()', [], ['uint8']), [2n]);
        assert.deepEqual(await view('issuer()', [], ['address']), [issuer]);
        assert.deepEqual(await view('totalSupply()', [], ['uint256']), [0n]);
    });

    it('lets the issuer mint and nobody else', async () => {
        const receipt = await send(issuer, 'mint(address,uint256)', [alice, 1000]);
        assert.equal(logsWithTopic(receipt, 'Transfer(address,address,uint256)').length, 1);
        await expectBalances(alice, 1000, 1000, 0);

        await expectRevert(alice, 'mint(address,uint256)', [alice, 1], 'Unauthorized(address)', [alice]);
        await expectRevert(stranger, 'burn(address,uint256)', [alice, 1], 'Unauthorized(address)', [stranger]);
    });

    it('mines a refused transaction as failed, and replaying it at its block gives the error', async () => {
        // An explicit gas limit makes sure no estimate refuses it up front: it is mined, and fails.
        const tx = { from: alice, to: token, data: calldata('mint(address,uint256)', [alice, 1]), gas: hex(200_000) };
        const receipt = await receiptOf(await rpc('eth_sendTransaction', [tx]));
        assert.equal(receipt.status, '0x0');
        const err = await rpc('eth_call', [tx, receipt.blockNumber]).then(() => assert.fail('no revert'), (e) => e);
        assert.deepEqual(decodeError(revertData(err)), ['Unauthorized(address)', [alice]]);
        await expectBalances(alice, 1000, 1000, 0);
    });

    it('holds funds and keeps transfers and transferFrom to the available balance', async () => {
        const expiresAt = (await latestTimestamp()) + 3600n;
        const receipt = await send(alice, 'hold(bytes32,address,uint256,uint64)', [holdId('h1'), bob, 300, expiresAt]);
        const [created] = logsWithTopic(receipt, 'HoldCreated(bytes32,address,address,uint256,uint64)');
        assert.deepEqual(created.topics.slice(1), [holdId('h1'), topicAddress(alice), topicAddress(bob)]);
        await expectBalances(alice, 1000, 700, 300);
        assert.deepEqual(await holdOf(holdId('h1')), {
            owner: alice, payee: bob, amount: 300n, expiresAt, status: HoldStatus.Active,
        });

        await expectRevert(alice, 'transfer(address,uint256)', [carol, 701],
            'InsufficientAvailableBalance(address,uint256,uint256)', [alice, 700, 701]);
        await send(alice, 'approve(address,uint256)', [carol, 1000]);
        await expectRevert(carol, 'transferFrom(address,address,uint256)', [alice, carol, 701],
            'InsufficientAvailableBalance(address,uint256,uint256)', [alice, 700, 701]);

        await send(carol, 'transferFrom(address,address,uint256)', [alice, carol, 100]);
        await send(carol, 'transfer(address,uint256)', [alice, 100]);
        await expectBalances(alice, 1000, 700, 300);
    });

    it('refuses a reused id, a zero amount, an expiry in the past and more than available', async () => {
        const hold = 'hold(bytes32,address,uint256,uint64)';
        await expectRevert(alice, hold, [holdId('h1'), bob, 1, 0], 'HoldExists(bytes32)', [holdId('h1')]);
        await expectRevert(bob, hold, [holdId('h1'), bob, 1, 0], 'HoldExists(bytes32)', [holdId('h1')]);
        await expectRevert(alice, hold, [holdId('h0'), bob, 0, 0], 'ZeroAmount()', []);
        const now = await latestTimestamp();
        await expectRevert(alice, hold, [holdId('h0'), bob, 1, now], 'HoldExpired(bytes32,uint64)', [holdId('h0'), now]);
        await expectRevert(alice, hold, [holdId('h0'), bob, 701, 0],
            'InsufficientAvailableBalance(address,uint256,uint256)', [alice, 700, 701]);
    });

    it('executes a hold to its payee (RELEASE), once', async () => {
        const id = holdId('h1');
        await expectRevert(stranger, 'executeHold(bytes32)', [id], 'Unauthorized(address)', [stranger]);
        await expectRevert(bob, 'executeHold(bytes32)', [id], 'Unauthorized(address)', [bob]);
        await expectRevert(stranger, 'cancelHold(bytes32)', [id], 'Unauthorized(address)', [stranger]);

        const receipt = await send(alice, 'executeHold(bytes32)', [id]);
        const [executed] = logsWithTopic(receipt, 'HoldExecuted(bytes32,address,address,uint256)');
        assert.deepEqual(executed.topics.slice(1), [id, topicAddress(alice), topicAddress(bob)]);
        const [transfer] = logsWithTopic(receipt, 'Transfer(address,address,uint256)');
        assert.deepEqual(transfer.topics.slice(1), [topicAddress(alice), topicAddress(bob)]);
        await expectBalances(alice, 700, 700, 0);
        await expectBalances(bob, 300, 300, 0);
        assert.equal((await holdOf(id)).status, HoldStatus.Executed);

        await expectRevert(alice, 'executeHold(bytes32)', [id], 'HoldNotActive(bytes32,uint8)', [id, HoldStatus.Executed]);
        await expectRevert(alice, 'cancelHold(bytes32)', [id], 'HoldNotActive(bytes32,uint8)', [id, HoldStatus.Executed]);
    });

    it('executes a hold without payee back to the owner, by the issuer too', async () => {
        const id = holdId('h2');
        await send(alice, 'hold(bytes32,address,uint256,uint64)', [id, ZERO, 200, 0]);
        await expectBalances(alice, 700, 500, 200);
        const receipt = await send(issuer, 'executeHold(bytes32)', [id]);
        assert.equal(logsWithTopic(receipt, 'Transfer(address,address,uint256)').length, 0);
        const [executed] = logsWithTopic(receipt, 'HoldExecuted(bytes32,address,address,uint256)');
        assert.deepEqual(executed.topics.slice(1), [id, topicAddress(alice), topicAddress(alice)]);
        await expectBalances(alice, 700, 700, 0);
        assert.equal((await holdOf(id)).status, HoldStatus.Executed);
    });

    it('cancels a hold back to the owner (CANCEL), by the owner or the issuer, once', async () => {
        const id = holdId('h3');
        await send(alice, 'hold(bytes32,address,uint256,uint64)', [id, carol, 100, 0]);
        await expectBalances(alice, 700, 600, 100);
        const receipt = await send(alice, 'cancelHold(bytes32)', [id]);
        const [cancelled] = logsWithTopic(receipt, 'HoldCancelled(bytes32,address,address,uint256)');
        assert.deepEqual(cancelled.topics.slice(1), [id, topicAddress(alice), topicAddress(alice)]);
        await expectBalances(alice, 700, 700, 0);
        await expectBalances(carol, 0, 0, 0);
        assert.equal((await holdOf(id)).status, HoldStatus.Cancelled);
        await expectRevert(alice, 'cancelHold(bytes32)', [id], 'HoldNotActive(bytes32,uint8)', [id, HoldStatus.Cancelled]);
        await expectRevert(alice, 'executeHold(bytes32)', [id], 'HoldNotActive(bytes32,uint8)', [id, HoldStatus.Cancelled]);

        const id4 = holdId('h4');
        await send(alice, 'hold(bytes32,address,uint256,uint64)', [id4, carol, 50, 0]);
        await send(issuer, 'cancelHold(bytes32)', [id4]);
        await expectBalances(alice, 700, 700, 0);
    });

    it('refuses unknown holds', async () => {
        const id = holdId('nope');
        assert.deepEqual(await holdOf(id), { owner: ZERO, payee: ZERO, amount: 0n, expiresAt: 0n, status: HoldStatus.None });
        await expectRevert(alice, 'executeHold(bytes32)', [id], 'UnknownHold(bytes32)', [id]);
        await expectRevert(alice, 'cancelHold(bytes32)', [id], 'UnknownHold(bytes32)', [id]);
    });

    it('lets anyone cancel an expired hold, and nobody execute it', async () => {
        const id = holdId('h5');
        const expiresAt = (await latestTimestamp()) + 60n;
        await send(alice, 'hold(bytes32,address,uint256,uint64)', [id, bob, 50, expiresAt]);
        await expectRevert(stranger, 'cancelHold(bytes32)', [id], 'Unauthorized(address)', [stranger]);

        await rpc('evm_increaseTime', [61]);
        await rpc('evm_mine');
        assert.ok((await latestTimestamp()) >= expiresAt);
        // Expired but not cancelled: the funds stay held until someone cancels.
        await expectBalances(alice, 700, 650, 50);
        await expectRevert(alice, 'executeHold(bytes32)', [id], 'HoldExpired(bytes32,uint64)', [id, expiresAt]);
        await expectRevert(issuer, 'executeHold(bytes32)', [id], 'HoldExpired(bytes32,uint64)', [id, expiresAt]);

        const receipt = await send(stranger, 'cancelHold(bytes32)', [id]);
        const [cancelled] = logsWithTopic(receipt, 'HoldCancelled(bytes32,address,address,uint256)');
        assert.deepEqual(cancelled.topics.slice(1), [id, topicAddress(alice), topicAddress(stranger)]);
        await expectBalances(alice, 700, 700, 0);
        await expectBalances(bob, 300, 300, 0);
        assert.equal((await holdOf(id)).status, HoldStatus.Cancelled);
    });

    it('burns only available funds, by the issuer', async () => {
        await send(alice, 'hold(bytes32,address,uint256,uint64)', [holdId('h6'), bob, 400, 0]);
        await expectRevert(issuer, 'burn(address,uint256)', [alice, 301],
            'InsufficientAvailableBalance(address,uint256,uint256)', [alice, 300, 301]);
        await send(issuer, 'burn(address,uint256)', [alice, 300]);
        await expectBalances(alice, 400, 0, 400);
        assert.deepEqual(await view('totalSupply()', [], ['uint256']), [700n]);

        await send(alice, 'executeHold(bytes32)', [holdId('h6')]);
        await expectBalances(alice, 0, 0, 0);
        await expectBalances(bob, 700, 700, 0);
        await send(issuer, 'burn(address,uint256)', [bob, 700]);
        assert.deepEqual(await view('totalSupply()', [], ['uint256']), [0n]);
        await checkInvariant();
    });
});
