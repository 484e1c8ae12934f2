// The SandboxRun reconciler's own bookkeeping, without a VM: a run whose step found its
// Sandbox's VM gone waits for the Sandbox's next VM rather than start its next attempt in the
// gone one, but not for ever (a 404 that passes, such as a service list lagging behind, must not
// hold it); and what a message is masked with when the run's inputs cannot all be read; and
// that it does not start in a VM holding values of a Secret rotated since (it could not mask them);
// its files from a ConfigMap; and what a run deleted while it runs leaves in its Sandbox's VM;
// and that a run's own VM whose allocation's answer was lost is looked for again before the run
// lets go of it.
import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { waitFor } from "../../../dev/wait.js";
import type { Sandbox, SandboxRun, Skill } from "../../../src/api/index.js";
import { FINALIZER, MARKER_KEY, kindNames } from "../../../src/api/names.js";
import { SandboxRunReconciler, type SandboxRunReconcilerOptions } from "../../../src/controllers/sandbox-run.js";
import { StatusWriter } from "../../../src/managed/status-writer.js";
import { outputFile, runDir, stepDir } from "../../../src/runs/script.js";
import { ObjectStore, type ConfigMapObject } from "../../../src/controllers/object-store.js";
import { REFERENCE_VIEW } from "../../../src/controllers/reference-view.js";
import type { KubeObject } from "../../../src/runtime/kube-client.js";
import type { SecretObject } from "../../../src/managed/connection-secret.js";
import { silentLogger } from "../../../src/runtime/logging.js";
import { sandboxes as sandboxKind } from "../../../src/controllers/sandbox.js";
import { FakeInformer, NS, ORG, World, reconcileContext, secretOf } from "./helpers.js";

const sandbox = (vmId: string): Sandbox =>
  ({
    metadata: { name: "box", namespace: NS, uid: "sb-uid", generation: 1 },
    spec: { tier: "standard" },
    status: { vmId, observedGeneration: 1, conditions: [{ type: "Ready", status: "True", reason: "Available", lastTransitionTime: "2030-01-01T00:00:00Z" }] },
  }) as unknown as Sandbox;

const run = { metadata: { name: "job", namespace: NS, uid: "run-uid", generation: 1 }, spec: { sandboxRef: { name: "box" }, steps: [{ name: "s", command: "true" }] } } as unknown as SandboxRun;

/** A run reconciler over `world`'s service and Sandboxes (its runs, API server and status as `withParts` gives them). */
function worldReconciler(world: World, withParts: Partial<SandboxRunReconcilerOptions>): SandboxRunReconciler {
  return new SandboxRunReconciler({
    store: world.ctx.store,
    sandboxes: world.informer(kindNames.sandbox).as<Sandbox>(),
    pool: world.pool,
    events: world.recorder(),
    sandboxDeps: { store: world.ctx.store, skills: world.informer(kindNames.skill).as<Skill>(), now: () => new Date(world.clock.ms) },
    log: silentLogger,
    now: () => new Date(world.clock.ms),
    ...withParts,
  } as unknown as SandboxRunReconcilerOptions);
}

function reconciler(sandboxes: FakeInformer<Sandbox>, clock: { ms: number }, secrets = new FakeInformer<SecretObject>(), configMaps = new FakeInformer<ConfigMapObject>()): SandboxRunReconciler {
  const options = {
    store: new ObjectStore(secrets.as<SecretObject>(), configMaps.as<ConfigMapObject>()),
    runs: new FakeInformer<SandboxRun>().as<SandboxRun>(),
    sandboxes: sandboxes.as<Sandbox>(),
    // No usable Connection: the VMs cannot be read again, which the wait does not depend on.
    pool: { forResource: () => { throw new Error("no Connection in this test"); } },
    log: silentLogger,
    now: () => new Date(clock.ms),
  } as unknown as SandboxRunReconcilerOptions;
  return new SandboxRunReconciler(options);
}

describe("SandboxRun: a VM found gone", () => {
  it("waits up to a minute for another VM, then uses the one its Sandbox names", () => {
    const clock = { ms: Date.parse("2030-01-01T00:00:00Z") };
    const sandboxes = new FakeInformer<Sandbox>();
    sandboxes.set(sandbox("vm-a"));
    const r = reconciler(sandboxes, clock);
    expect(r.sandboxState(run, {})).toEqual({ state: "ready", vmId: "vm-a" });

    r.vmLost(run, "vm-a");
    const waiting = r.sandboxState(run, {});
    expect(waiting).toMatchObject({ state: "waiting", reason: "WaitingForSandbox" });
    expect(waiting.state === "waiting" && waiting.message).toContain("the VM vm-a of Sandbox \"box\" is gone");
    expect(r.lostVMWaitEnds(run)).toBe(clock.ms + 60_000);

    clock.ms += 59_000;
    expect(r.sandboxState(run, {}).state).toBe("waiting");

    // The Sandbox learnt of the loss and has another VM: no more waiting.
    sandboxes.set(sandbox("vm-b"));
    expect(r.sandboxState(run, {})).toEqual({ state: "ready", vmId: "vm-b" });

    // Or it never did (the 404 passed): after the minute the run goes ahead in the VM it names.
    sandboxes.set(sandbox("vm-a"));
    expect(r.sandboxState(run, {}).state).toBe("waiting");
    clock.ms += 1_000;
    expect(r.sandboxState(run, {})).toEqual({ state: "ready", vmId: "vm-a" });
    expect(r.lostVMWaitEnds(run)).toBeUndefined();
  });
});

describe("SandboxRun: masking when an input cannot be read", () => {
  it("masks with every Secret value it can read (the run's, its VM's, its files'), skipping the ones gone", () => {
    const secrets = new FakeInformer<SecretObject>();
    const secret = (name: string, data: Record<string, string>) => secrets.set(secretOf(name, data));
    secret("run-env", { TOKEN: "run-token-value" });
    secret("vm-env", { KEY: "vm-key-value" });
    secret("file", { "id_rsa": "file-secret-value" });
    const sandboxes = new FakeInformer<Sandbox>();
    sandboxes.set({ ...sandbox("vm-a"), spec: { tier: "standard", envFrom: [{ secretRef: { name: "vm-env" } }] } } as unknown as Sandbox);
    const r = reconciler(sandboxes, { ms: 0 }, secrets);
    const withInputs = {
      ...run,
      spec: {
        ...run.spec,
        envFrom: [{ secretRef: { name: "run-env" } }, { secretRef: { name: "deleted" } }],
        files: [{ path: "/workspace/k", secretKeyRef: { name: "file", key: "id_rsa" } }],
      },
    } as unknown as SandboxRun;
    expect(() => r.inputs(withInputs, { files: true })).toThrow(/deleted/);
    const masking = r.maskingSecrets(withInputs);
    expect(masking.values.sort()).toEqual(["file-secret-value", "run-token-value", "vm-key-value"]);
    // The run's own Secret that is gone: the output of a step cannot be masked with it.
    expect(masking.gone).toBe("deleted");
  });

  it("masks with its VM's envFrom Secrets in sharded mode too, where its Sandbox is looked up in the reference view", () => {
    const secrets = new FakeInformer<SecretObject>();
    secrets.set({ metadata: { name: "vm-env", namespace: NS }, data: { KEY: Buffer.from("vm-key-value").toString("base64") } } as SecretObject);
    const sandboxes = new FakeInformer<Sandbox>();
    const whole = { ...sandbox("vm-a"), spec: { tier: "standard", env: { A: "b" }, envFrom: [{ secretRef: { name: "vm-env" } }] } };
    sandboxes.set(REFERENCE_VIEW.transform(structuredClone(whole) as KubeObject) as unknown as Sandbox);
    expect(reconciler(sandboxes, { ms: 0 }, secrets).maskingSecrets(run)).toEqual({ values: ["vm-key-value"], gone: undefined });
  });

  it("masks with a Secret's old value after it is rotated while the run runs (its step's env holds the old one)", () => {
    const secrets = new FakeInformer<SecretObject>();
    const rotate = (value: string) => secrets.set({ metadata: { name: "run-env", namespace: NS }, data: { TOKEN: Buffer.from(value).toString("base64") } } as SecretObject);
    rotate("old-token-value");
    const r = reconciler(new FakeInformer<Sandbox>(), { ms: 0 }, secrets);
    const withEnv = { ...run, spec: { ...run.spec, envFrom: [{ secretRef: { name: "run-env" } }] } } as unknown as SandboxRun;
    expect(r.maskingSecrets(withEnv).values).toEqual(["old-token-value"]);
    rotate("new-token-value");
    expect(r.maskingSecrets(withEnv).values.sort()).toEqual(["new-token-value", "old-token-value"]);
  });

  it("starts a step after the first without its files' ConfigMap (deleted since the first started): only the first uploads them", () => {
    const withFiles = {
      ...run,
      spec: { ...run.spec, env: { MODE: "fast" }, files: [{ path: "/workspace/cfg", configMapKeyRef: { name: "pruned", key: "cfg" } }] },
    } as unknown as SandboxRun;
    const r = reconciler(new FakeInformer<Sandbox>(), { ms: 0 });
    expect(() => r.inputs(withFiles, { files: true })).toThrow(/pruned/);
    expect(r.inputs(withFiles, { files: false })).toEqual({ envs: { MODE: "fast" }, secretValues: [], files: [] });
    expect(r.maskingSecrets(withFiles)).toEqual({ values: [], gone: undefined });
  });
});

describe("SandboxRun: files from a ConfigMap", () => {
  it("uploads a key kept in binaryData (a file that is not UTF-8, from kubectl create configmap --from-file) as its bytes, and waits for a key in neither", () => {
    const configMaps = new FakeInformer<ConfigMapObject>();
    const bytes = Buffer.from([0xff, 0x00, 0x9c, 0x80]);
    configMaps.set({ metadata: { name: "model", namespace: NS }, data: { "labels.txt": "cat\ndog\n" }, binaryData: { "model.bin": bytes.toString("base64") } });
    const r = reconciler(new FakeInformer<Sandbox>(), { ms: 0 }, new FakeInformer<SecretObject>(), configMaps);
    const withFiles = (key: string) =>
      ({ ...run, spec: { ...run.spec, files: [{ path: "in/file", configMapKeyRef: { name: "model", key } }] } }) as unknown as SandboxRun;
    const [binary] = r.inputs(withFiles("model.bin"), { files: true }).files;
    expect(binary?.path).toBe("/workspace/in/file");
    expect(Buffer.isBuffer(binary?.content) && binary.content.equals(bytes)).toBe(true);
    expect(r.inputs(withFiles("labels.txt"), { files: true }).files).toEqual([{ path: "/workspace/in/file", content: "cat\ndog\n", secret: false }]);
    expect(() => r.inputs(withFiles("weights.bin"), { files: true })).toThrow(expect.objectContaining({ reason: "ConfigMapKeyMissing", message: 'ConfigMap "model" (spec.files[0].configMapKeyRef) lacks the key "weights.bin"; its keys: "labels.txt", "model.bin"' }));
  });
});

describe("SandboxRun: a Sandbox whose VM holds values of a Secret rotated since", () => {
  let w: World | undefined;
  afterEach(async () => {
    await w?.close();
    w = undefined;
  });

  async function setUp(env?: Record<string, string>) {
    const world = (w = await World.start());
    const secret = (data: Record<string, string>) => world.secrets.set(secretOf("vm-env", data));
    const apply = (policies?: string[]) =>
      world.apply<Sandbox>("sandboxes", {
        metadata: { name: "box" },
        spec: { tier: "standard", ttlSeconds: 600, envFrom: [{ secretRef: { name: "vm-env" } }], ...(env && { env }), ...(policies && { managementPolicies: policies }) },
      });
    const reconcileSandbox = () => world.reconcile(sandboxKind(world.ctx), "box");
    const vmId = () => world.get<Sandbox>("sandboxes", "box").status?.vmId as string;
    const r = worldReconciler(world, { runs: new FakeInformer<SandboxRun>().as<SandboxRun>() });
    return { world, r, secret, apply, reconcileSandbox, vmId };
  }

  it("holds the Sandbox's VM to have other values than its Secrets now until the Sandbox replaces it, or under policies without Update until the values come back", async () => {
    const { r, secret, apply, reconcileSandbox, vmId } = await setUp();
    const held = () => r.vmHoldsRotatedSecrets(run, vmId());
    secret({ TOKEN: "first-value-aa11" });
    apply();
    await reconcileSandbox();
    const first = vmId();
    expect(await held()).toBe(false);

    secret({ TOKEN: "rotated-value-bb22" });
    expect(await held()).toBe(true);
    await reconcileSandbox(); // replaced: the new VM has the new values
    expect(vmId()).not.toBe(first);
    expect(await held()).toBe(false);

    apply(["Observe", "Create", "Delete", "LateInitialize"]);
    await reconcileSandbox();
    const second = vmId();
    secret({ TOKEN: "third-value-cc33" });
    await reconcileSandbox();
    expect(vmId()).toBe(second); // not replaced: Update is left out
    expect(await held()).toBe(true);
    secret({ TOKEN: "rotated-value-bb22" });
    expect(await held()).toBe(false);
  });

  it("a run's own VM (sandboxTemplate) allocated before its Secret was rotated is found so, given back, and kept out of the next allocation", async () => {
    const { world, r, secret } = await setUp();
    secret({ TOKEN: "first-value-aa11" });
    const own = {
      ...run,
      metadata: { ...run.metadata, uid: "run-uid-own" },
      spec: { sandboxTemplate: { tier: "standard", ttlSeconds: 600, envFrom: [{ secretRef: { name: "vm-env" } }] }, steps: run.spec.steps },
    } as unknown as SandboxRun;
    const first = await r.allocate(own);
    expect(await r.vmHoldsRotatedSecrets(own, first)).toBe(false);

    secret({ TOKEN: "rotated-value-bb22" });
    expect(await r.vmHoldsRotatedSecrets(own, first)).toBe(true);
    world.calls();
    await r.giveBackOutdatedOwnVM(own, first);
    expect(world.writes()).toEqual(["vms.release"]);
    expect(world.emu.state.vms.has(first)).toBe(false);
    expect(world.events.map((e) => e.reason)).toEqual(["Replaced"]);
    // A list lagging behind the release (the snapshot put back as it was) does not bring it back.
    world.handle().vms.put({ id: first, state: "allocated", metadata: { "agentcompute.dev/uid": "run-uid-own" } });
    const second = await r.allocate(own);
    expect(second).not.toBe(first);
    expect(await r.vmHoldsRotatedSecrets(own, second)).toBe(false);
  });

  it("asks the service for a VM its Connection's snapshot does not list (another replica allocated it), and does not count a key spec.env sets", async () => {
    const { world, r, secret, apply, reconcileSandbox, vmId } = await setUp({ DEBUG: "0" });
    secret({ TOKEN: "first-value-aa11", DEBUG: "1" });
    apply();
    await reconcileSandbox();
    const first = vmId();
    // spec.env sets DEBUG: the VM does not hold the Secret's value of it, nor is it replaced for it.
    secret({ TOKEN: "first-value-aa11", DEBUG: "2" });
    await reconcileSandbox();
    expect(vmId()).toBe(first);
    expect(await r.vmHoldsRotatedSecrets(run, first)).toBe(false);

    secret({ TOKEN: "rotated-value-bb22", DEBUG: "2" });
    world.handle().vms.remove(first);
    world.calls();
    expect(await r.vmHoldsRotatedSecrets(run, first)).toBe(true);
    expect(await r.vmHoldsRotatedSecrets(run, first)).toBe(true);
    expect(world.calls()).toEqual(["vms.get"]); // once: the answer is kept in the snapshot
  });
});

describe("SandboxRun: a sandboxRef run deleted while it runs", () => {
  let w: World | undefined;
  afterEach(async () => {
    await w?.close();
    w = undefined;
  });

  /** A Sandbox's VM, and a run reconciler over the world's API server. */
  async function setUp() {
    const world = (w = await World.start());
    world.apply<Sandbox>("sandboxes", { metadata: { name: "box" }, spec: { tier: "standard", ttlSeconds: 600 } });
    await world.reconcile(sandboxKind(world.ctx), "box");
    const vmId = world.get<Sandbox>("sandboxes", "box").status?.vmId as string;
    const r = worldReconciler(world, {
      runs: world.informer(kindNames.sandboxRun).as<SandboxRun>(),
      kube: world.kube,
      status: new StatusWriter(world.kube, () => new Date(world.clock.ms)),
    });
    const workspace = world.emu.runtimes.get(vmId)!.workspace;
    const request = { namespace: NS, name: "job" };
    /** The run deleted (its finalizer then does its work), and the files it left in the VM. */
    const deleteRun = async (spec: unknown) => {
      world.apply<SandboxRun>("sandboxruns", { metadata: { name: "job", deletionTimestamp: "2030-01-01T00:00:01Z" }, spec });
      await r.reconcile(request, reconcileContext());
      expect(world.get<SandboxRun>("sandboxruns", "job").metadata.finalizers ?? []).toEqual([]);
      const dir = join(workspace, runDir(world.get<SandboxRun>("sandboxruns", "job").metadata.uid));
      return existsSync(dir) ? readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).map((e) => e.name) : [];
    };
    return { world, r, workspace, request, deleteRun };
  }

  it("stops the step and removes the run's directory, with its output files, from the Sandbox's VM (shared, and outliving the run)", async () => {
    const { world, r, workspace, request, deleteRun } = await setUp();
    const spec = { sandboxRef: { name: "box" }, steps: [{ name: "s", command: "echo working; sleep 30" }] };
    const job = world.apply<SandboxRun>("sandboxruns", { metadata: { name: "job" }, spec });
    await r.reconcile(request, reconcileContext());
    expect(world.get<SandboxRun>("sandboxruns", "job").status?.phase).toBe("Running");
    const output = join(workspace, outputFile(stepDir(job.metadata.uid, 1, 0)));
    await waitFor(() => existsSync(output) || undefined, { description: "the step's output file" });

    const left = await deleteRun(spec);
    // Only the stopped step's cancel file may be there again (and its markers, were it still
    // dying): what the step wrote is gone.
    expect(left).toContain("cancel");
    expect(left).not.toContain("output");
    expect(left).not.toContain("started");
  });

  it("removes the output of the steps before the next one, deleted between two steps", async () => {
    const { world, workspace, deleteRun } = await setUp();
    const spec = { sandboxRef: { name: "box" }, steps: [{ name: "a", command: "echo a" }, { name: "b", command: "echo b" }] };
    const job = world.apply<SandboxRun>("sandboxruns", { metadata: { name: "job", finalizers: [FINALIZER] }, spec });
    const vmId = world.get<Sandbox>("sandboxes", "box").status?.vmId as string;
    // Step a ended; b is next, and not started.
    world.setStatus("sandboxruns", "job", {
      phase: "Running",
      startTime: "2030-01-01T00:00:00Z",
      attempts: 1,
      vmId,
      steps: [{ name: "a", startedAt: "2030-01-01T00:00:00Z", finishedAt: "2030-01-01T00:00:00Z", exitCode: 0 }],
    });
    const a = join(workspace, stepDir(job.metadata.uid, 1, 0));
    mkdirSync(a, { recursive: true });
    writeFileSync(join(a, "output"), "a\n");
    expect(await deleteRun(spec)).toEqual([]);
  });
});

describe("SandboxRun: agentd refusing a step's start with its env quoted", () => {
  let w: World | undefined;
  afterEach(async () => {
    await w?.close();
    w = undefined;
  });

  // agentd's answer may quote the request it refuses: an envFrom Secret's value must not reach
  // the run's status, its Events, or the error the pass ends with, whatever its length (a PIN
  // under 4 characters) or however a Go service writes it in JSON (`&` as \u0026, in a body
  // that is not a known error shape and is kept as a snippet).
  it.each([
    { what: "a value under 4 characters, in a known error body", value: "k9Z", body: { error: "invalid envs: PIN=k9Z" } as unknown, quoted: "k9Z" },
    { what: "a value with & in a Go-encoded body kept as a snippet", value: "tok&en-value-42", body: '{"detail":"invalid envs: PIN=tok\\u0026en-value-42"}', quoted: "tok\\u0026en-value-42" },
  ])("keeps $what out of status, Events and the error", async ({ value, body, quoted }) => {
    const world = (w = await World.start());
    world.apply<Sandbox>("sandboxes", { metadata: { name: "box" }, spec: { tier: "standard", ttlSeconds: 600 } });
    await world.reconcile(sandboxKind(world.ctx), "box");
    world.secrets.set(secretOf("run-env", { PIN: value }));
    const r = worldReconciler(world, {
      runs: world.informer(kindNames.sandboxRun).as<SandboxRun>(),
      kube: world.kube,
      status: new StatusWriter(world.kube, () => new Date(world.clock.ms)),
    });
    world.emu.injectFault({ method: "POST", path: /\/r\/v1\/commands\/run$/, action: { status: 400, body } });
    world.apply<SandboxRun>("sandboxruns", {
      metadata: { name: "job" },
      spec: { sandboxRef: { name: "box" }, envFrom: [{ secretRef: { name: "run-env" } }], steps: [{ name: "s", command: "true" }] },
    });
    const thrown = await r.reconcile({ namespace: NS, name: "job" }, reconcileContext()).then(
      () => undefined,
      (err: unknown) => err,
    );

    const status = world.get<SandboxRun>("sandboxruns", "job").status;
    // The refusal is reported (the run failed: the same spec gets the same answer), its words kept.
    expect(status?.phase).toBe("Failed");
    expect(JSON.stringify(status)).not.toContain(quoted);
    expect(JSON.stringify(status)).toContain("invalid envs: PIN=[REDACTED]");
    expect(JSON.stringify(world.events)).not.toContain(quoted);
    expect(thrown === undefined ? "" : String(thrown)).not.toContain(quoted);
  });
});

describe("SandboxRun: a run's own VM (sandboxTemplate) whose allocation's answer was lost", () => {
  let w: World | undefined;
  afterEach(async () => {
    await w?.close();
    w = undefined;
  });

  /** A template run whose first allocation gets no answer (nothing made yet: it lands later, by `land`). */
  async function setUp(extra: Record<string, unknown> = {}) {
    const world = (w = await World.start());
    const r = worldReconciler(world, {
      runs: world.informer(kindNames.sandboxRun).as<SandboxRun>(),
      kube: world.kube,
      status: new StatusWriter(world.kube, () => new Date(world.clock.ms)),
    });
    const request = { namespace: NS, name: "job" };
    const spec = { sandboxTemplate: { tier: "standard", ttlSeconds: 600 }, steps: [{ name: "s", command: "true" }], ...extra };
    const job = world.apply<SandboxRun>("sandboxruns", { metadata: { name: "job" }, spec });
    world.emu.injectFault({ method: "POST", path: "/compute/v1/vms/allocate", times: 1, action: { drop: "before" } });
    await expect(r.reconcile(request, reconcileContext())).rejects.toThrow(/outcome unknown/);
    const current = () => world.get<SandboxRun>("sandboxruns", "job");
    const land = () => world.emu.state.allocateVM({ tier: "standard", ttl_seconds: 600, org_id: ORG, metadata: { [MARKER_KEY]: job.metadata.uid } }).vm_id;
    const live = (id: string) => world.emu.state.vms.get(id)?.state === "allocated";
    const pass = () => r.reconcile(request, reconcileContext()) as Promise<{ requeueAfterMs: number } | undefined>;
    return { world, spec, current, land, live, pass };
  }

  it("deleted meanwhile: keeps its finalizer a while, so a VM that lands late is released too", async () => {
    const { world, spec, current, land, live, pass } = await setUp();
    world.advance(10_000);
    world.apply<SandboxRun>("sandboxruns", { metadata: { name: "job", deletionTimestamp: "2030-01-01T00:00:10Z" }, spec });
    // What is there goes now; the finalizer stays until 60 s after the allocation.
    expect(await pass()).toEqual({ requeueAfterMs: 50_000 });
    expect(current().metadata.finalizers).toContain(FINALIZER);
    const late = land(); // after that look, on a list that is not stale yet
    world.advance(50_000);
    await pass();
    expect(live(late)).toBe(false);
    expect(current().metadata.finalizers ?? []).toEqual([]);
  });

  it("deleted meanwhile with its Connection gone: says a VM it may have made was not given back (the deletion does not wait for a Connection)", async () => {
    const { world, spec, current, pass } = await setUp();
    world.informer({ kind: "connections", plural: "connections" }).delete(NS, "default");
    world.apply<SandboxRun>("sandboxruns", { metadata: { name: "job", deletionTimestamp: "2030-01-01T00:00:01Z" }, spec });
    await pass();
    expect(current().metadata.finalizers ?? []).toEqual([]);
    expect(world.events).toContainEqual({
      type: "Warning",
      reason: "VMNotReleased",
      message: expect.stringContaining("a VM the allocation sent at 2030-01-01T00:00:00.000Z may have made (its answer never came) was not given back"),
    });
  });

  it("failed on its deadline meanwhile: says its VM is given back only after a while, so a VM that lands late is released too", async () => {
    const { world, current, land, live, pass } = await setUp({ activeDeadlineSeconds: 10 });
    world.advance(11_000);
    const waiting = await pass();
    expect(current().status).toMatchObject({ phase: "Failed" });
    expect(current().status?.vmReleased).toBeUndefined();
    expect(current().metadata.finalizers).toContain(FINALIZER);
    expect(waiting?.requeueAfterMs).toBeGreaterThan(0);
    expect(waiting?.requeueAfterMs).toBeLessThanOrEqual(49_000);
    const late = land();
    world.advance(49_001);
    await pass();
    expect(live(late)).toBe(false);
    expect(current().status?.vmReleased).toBe(true);
    expect(current().metadata.finalizers ?? []).toEqual([]);
  });
});
