// ForwardedVM: a VM that is gone told apart from a file or command agentd does not know, when
// the forwarding route's answer does not say which. The compute API's error body need not carry
// error_code (SERVICE.md: never assume it), so a 404 without one, and a 502, are asked about
// with GET /compute/v1/vms/{id}. Against the emulator: the ambiguous answers are its injected
// faults on the forwarding route, the VMs' states its own (allocated, released, deleted,
// expired, never allocated), and the lookups are counted in its request log.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../../dev/wait.js";
import { Heartbeats, startStep, observeStep } from "../../../src/runs/steps.js";
import { stepPath } from "../../../src/runs/script.js";
import { ForwardedVM, VMGoneError } from "../../../src/runs/vm.js";
import { ServiceError } from "../../../src/service/index.js";
import { rejection, start, type Harness } from "../service/helpers.js";

let h: Harness;
const heartbeats = new Heartbeats();
const opened: ForwardedVM[] = [];

beforeAll(async () => {
  h = await start();
});
afterAll(async () => {
  await h.close();
});
afterEach(async () => {
  h.emu.clearFaults();
  await Promise.all(opened.splice(0).map((v) => v.close()));
});

/** A live VM of its own, and a ForwardedVM to it. */
async function liveVM(opts: { ttlSeconds?: number } = {}): Promise<{ id: string; vm: ForwardedVM }> {
  const id = (await h.client.vms.allocate({ tier: "standard", ...(opts.ttlSeconds !== undefined && { ttl_seconds: opts.ttlSeconds }) })).vm_id;
  return { id, vm: forwardedTo(id) };
}

function forwardedTo(id: string): ForwardedVM {
  const vm = new ForwardedVM({ baseURL: h.emu.baseURL, vmId: id, client: h.client });
  opened.push(vm);
  return vm;
}

const escaped = (id: string) => id.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
/** The forwarding route of this VM, whatever agentd path. */
const forwardRoute = (id: string) => new RegExp(`^/compute/v1/vms/${escaped(id)}/r/`);

/** The compute API's 404 without error_code (its body's fields are all optional): whose it is, it does not say. */
function bare404(id: string): void {
  h.emu.injectFault({ path: forwardRoute(id), times: Infinity, action: { status: 404, body: { code: 404, message: "vm not found" } } });
}

/** The forwarding route's 502: the VM cannot be reached (the emulator's own body for it). */
function badGateway(id: string): void {
  h.emu.injectFault({ path: forwardRoute(id), times: Infinity, action: { status: 502 } });
}

/** How many times GET /compute/v1/vms/{id} was asked (the emulator's request log). */
const lookups = (id: string) => h.emu.requests.filter((r) => r.operation === "vms.get" && r.method === "GET" && r.path === `/compute/v1/vms/${id}`).length;

/** Every call of a RunVM, each expected to fail with VMGoneError. */
async function expectEveryCallGone(vm: ForwardedVM): Promise<void> {
  await expect(vm.status("c1")).rejects.toBeInstanceOf(VMGoneError);
  await expect(vm.read("/workspace/x")).rejects.toBeInstanceOf(VMGoneError);
  await expect(vm.readEnds("/workspace/x", 10, 10)).rejects.toBeInstanceOf(VMGoneError);
  await expect(vm.kill("c1")).rejects.toBeInstanceOf(VMGoneError);
  await expect(vm.removeDir("/workspace/d")).rejects.toBeInstanceOf(VMGoneError);
  await expect(vm.start("true", { cwd: "/workspace" })).rejects.toBeInstanceOf(VMGoneError);
  await expect(vm.upload("/workspace/f", "x")).rejects.toBeInstanceOf(VMGoneError);
}
const CALLS = 7;

/** The compute API answers a bare 404 for `id`: every call is VMGoneError, each after one look-up. */
async function expectGoneAfterOneLookupEach(id: string, vm: ForwardedVM): Promise<void> {
  bare404(id);
  const before = lookups(id);
  await expectEveryCallGone(vm);
  expect(lookups(id) - before).toBe(CALLS);
}

describe("ForwardedVM: a 404 that does not say whose it is", () => {
  it("is the VM gone, whatever the call, when the VM was released", async () => {
    const { id, vm } = await liveVM();
    await h.client.vms.release(id, false);
    await expectGoneAfterOneLookupEach(id, vm);
  });

  it("is the VM gone, whatever the call, when the VM was deleted", async () => {
    const { id, vm } = await liveVM();
    await h.client.vms.delete(id);
    bare404(id);
    await expectEveryCallGone(vm);
  });

  it("is the VM gone, whatever the call, when the VM's TTL ran out", async () => {
    const { id, vm } = await liveVM({ ttlSeconds: 1 });
    await waitFor(() => !h.emu.state.vms.has(id), { timeoutMs: 10_000, intervalMs: 50, description: "the VM expired" });
    await expectGoneAfterOneLookupEach(id, vm);
  });

  it("is the VM gone, whatever the call, when the compute API never knew the VM", async () => {
    const id = "vm-never-allocated-0001";
    const vm = forwardedTo(id);
    await expectGoneAfterOneLookupEach(id, vm);
  });

  it("is the VM gone, whatever the call, when the compute API reports it terminated", async () => {
    // The emulator forgets a VM that ends (its GET answers 404); a service may instead keep it
    // and report a state that is not live: that answer, the VM's own view but terminated.
    const { id, vm } = await liveVM();
    const view = await h.client.vms.get(id);
    h.emu.injectFault({ method: "GET", path: `/compute/v1/vms/${id}`, times: Infinity, action: { status: 200, body: { ...view, state: "terminated" } } });
    await expectGoneAfterOneLookupEach(id, vm);
  });

  it("is agentd's (no such command or file) when the VM is live: one lookup per answer", async () => {
    const { id, vm } = await liveVM();
    bare404(id);
    const before = lookups(id);
    expect(await vm.status("c1")).toBeUndefined();
    expect(lookups(id) - before).toBe(1);
    expect(await vm.read("/workspace/x")).toBeUndefined();
    expect(lookups(id) - before).toBe(2);
    expect(await vm.readEnds("/workspace/x", 10, 10)).toBeUndefined();
    expect(lookups(id) - before).toBe(3);
    await vm.removeDir("/workspace/d");
    expect(lookups(id) - before).toBe(4);
    await vm.kill("c1");
    expect(lookups(id) - before).toBe(5);
  });

  it("is agentd's when agentd itself answers 404 (a file that is not there) in a live VM: asked once", async () => {
    // No fault: the emulator's agentd answers its own {code, message}, without error_code.
    const { id, vm } = await liveVM();
    const before = lookups(id);
    expect(await vm.read("/workspace/no-such-file.txt")).toBeUndefined();
    expect(await vm.status("no-such-command")).toBeUndefined();
    expect(lookups(id) - before).toBe(2);
  });

  it("a step followed through a second start (its exit file not there yet) costs no look-up at each poll", async () => {
    const { id, vm } = await liveVM();
    const ref = { runUid: "uid-twice", attempt: 1, index: 0 };
    await startStep(vm, ref, { command: "sleep 30" }, {});
    const second = (await startStep(vm, ref, { command: "sleep 30" }, {}))!;
    await waitFor(async () => (await vm.status(second))?.running === false);
    const before = lookups(id);
    for (let i = 0; i < 5; i++) expect(await observeStep(vm, ref, second, heartbeats)).toEqual({ state: "running" });
    expect(lookups(id) - before).toBe(0);
  });

  it("a step followed by its files alone (the VM named no id) costs no look-up at each poll once it beats", async () => {
    const { id, vm } = await liveVM();
    const ref = { runUid: "uid-no-id", attempt: 1, index: 0 };
    h.emu.setOptions({ agentdNoStartEvent: true });
    try {
      expect(await startStep(vm, ref, { command: "sleep 30" }, {})).toBeUndefined();
    } finally {
      h.emu.setOptions({ agentdNoStartEvent: false });
    }
    await waitFor(async () => (await vm.read(`${stepPath(ref.runUid, 1, 0)}/alive`)) !== undefined);
    const before = lookups(id);
    for (let i = 0; i < 5; i++) expect(await observeStep(vm, ref, undefined, heartbeats)).toEqual({ state: "running" });
    expect(lookups(id) - before).toBe(0);
  });

  it("is never read as agentd's when the VM's state cannot be had: the lookup's failure is thrown", async () => {
    const { id, vm } = await liveVM();
    bare404(id);
    h.emu.injectFault({ method: "GET", path: `/compute/v1/vms/${id}`, times: Infinity, action: { status: 500 } });
    for (const call of [() => vm.read("/workspace/x"), () => vm.status("c1"), () => vm.readEnds("/workspace/x", 1, 1), () => vm.removeDir("/workspace/d")]) {
      const err = await rejection(call());
      expect(err).toBeInstanceOf(ServiceError);
      expect(err).not.toBeInstanceOf(VMGoneError);
      expect(err).toMatchObject({ operation: "vms.get", status: 500, retryable: true });
    }
  });

  it("a step whose VM is gone is not a lost command (CommandLost) but a gone VM (VMLost)", async () => {
    const { id, vm } = await liveVM();
    const ref = { runUid: "uid-gone", attempt: 1, index: 0 };
    const commandId = (await startStep(vm, ref, { command: "sleep 30" }, {}))!;
    expect(await observeStep(vm, ref, commandId, heartbeats)).toEqual({ state: "running" });
    await h.client.vms.release(id, false);
    bare404(id);
    await expect(observeStep(vm, ref, commandId, heartbeats)).rejects.toBeInstanceOf(VMGoneError);
  });
});

describe("ForwardedVM: answers that say whose they are", () => {
  it("takes the compute API's 404 with error_code (the emulator's own, for a released VM) as the VM gone, without asking", async () => {
    const { id, vm } = await liveVM();
    await h.client.vms.release(id, false);
    const before = lookups(id);
    await expect(vm.status("c1")).rejects.toBeInstanceOf(VMGoneError);
    await expect(vm.read("/workspace/x")).rejects.toBeInstanceOf(VMGoneError);
    await expect(vm.start("true", {})).rejects.toBeInstanceOf(VMGoneError);
    expect(h.emu.requests.filter((r) => r.operation === "vms.forward" && r.path.startsWith(`/compute/v1/vms/${id}/r/`)).map((r) => r.status).slice(-3)).toEqual([404, 404, 404]);
    expect(lookups(id) - before).toBe(0);
  });

  it("takes a 404 with error_code as the VM gone without asking, even of a VM that is live", async () => {
    const { id, vm } = await liveVM();
    h.emu.injectFault({ path: forwardRoute(id), times: Infinity, action: { status: 404, body: { code: 404, error_code: "VM_NOT_FOUND", message: "vm not found" } } });
    await expect(vm.status("c1")).rejects.toBeInstanceOf(VMGoneError);
    await expect(vm.read("/workspace/x")).rejects.toBeInstanceOf(VMGoneError);
    expect(lookups(id)).toBe(0);
  });

  it("asks nothing of an answer that is not an error", async () => {
    const { id, vm } = await liveVM();
    await vm.upload("/workspace/ok.txt", "ok\n");
    expect(await vm.read("/workspace/ok.txt")).toBe("ok\n");
    const commandId = (await vm.start("sleep 5", { cwd: "/workspace" }))!;
    expect(await vm.status(commandId)).toMatchObject({ id: commandId, running: true });
    await vm.kill(commandId);
    expect(lookups(id)).toBe(0);
  });
});

describe("ForwardedVM: a 502 (the VM cannot be reached)", () => {
  it("is the VM gone when the compute API says so", async () => {
    const { id, vm } = await liveVM();
    await h.client.vms.release(id, false);
    badGateway(id);
    await expect(vm.status("c1")).rejects.toBeInstanceOf(VMGoneError);
    await expect(vm.start("true", {})).rejects.toBeInstanceOf(VMGoneError);
    expect(lookups(id)).toBe(2);
  });

  it("stands, to be retried, when the VM is there: asked once", async () => {
    const { id, vm } = await liveVM();
    badGateway(id);
    const err = await rejection(vm.status("c1"));
    expect(err).toBeInstanceOf(ServiceError);
    expect(err).not.toBeInstanceOf(VMGoneError);
    expect(err).toMatchObject({ status: 502, retryable: true });
    expect(lookups(id)).toBe(1);
  });
});
