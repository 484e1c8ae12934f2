// The replica's side of a move: an object that arrives from another owner tells its inventory
// (so that lookups that could make a second service object wait for a read since), once, on
// the reconcile that works on it; and which inventory that is, for each sharded kind.
import { describe, expect, it } from "vitest";
import { kindNames } from "../../../src/api/names.js";
import { RetryNoLaterThan, type Controller, type ReconcileContext, type Reconciler, type Request } from "../../../src/runtime/controller.js";
import type { Informer } from "../../../src/runtime/informer.js";
import { KubeApiError, type KubeClient, type KubeObject } from "../../../src/runtime/kube-client.js";
import { silentLogger } from "../../../src/runtime/logging.js";
import { SHARDED_CONTROLLERS, arrivalInventory } from "../../../src/sharding/index.js";
import { DRAIN_LABEL, OWNER_LABEL } from "../../../src/sharding/labels.js";
import { MembershipLapsed } from "../../../src/sharding/membership.js";
import { ReplicaShard, type ArrivalSink } from "../../../src/sharding/replica.js";
import { Ring } from "../../../src/sharding/ring.js";
import type { SuccessionView } from "../../../src/sharding/succession.js";

const ME = "replica-a";
const NS = "team-a";

type Obj = KubeObject & { metadata: { labels?: Record<string, string>; finalizers?: string[] } };

/** The replica's own informer of one kind: what the watch delivered, and its handlers. */
class Share {
  readonly objects = new Map<string, Obj>();
  private readonly handlers = new Map<string, Array<(obj: Obj) => void>>();

  synced = true;
  /** The selectors it was switched to (setLabelSelector), and the relist each waits for. */
  readonly selectors: string[] = [];
  relisted: () => void = () => undefined;

  setLabelSelector(selector: string): Promise<void> {
    this.selectors.push(selector);
    return new Promise((resolve) => (this.relisted = resolve));
  }

  get(namespace: string | undefined, name: string): Obj | undefined {
    return this.objects.get(`${namespace ?? ""}/${name}`);
  }

  list(): Obj[] {
    return [...this.objects.values()];
  }

  hasSynced(): boolean {
    return this.synced;
  }

  on(event: string, handler: (obj: Obj) => void): () => void {
    this.handlers.set(event, [...(this.handlers.get(event) ?? []), handler]);
    return () => undefined;
  }

  /** The watch delivers an object labelled for this replica. */
  add(obj: Obj): void {
    this.objects.set(`${obj.metadata.namespace ?? ""}/${obj.metadata.name ?? ""}`, obj);
    for (const h of this.handlers.get("add") ?? []) h(obj);
  }

  /** The watch delivers a change of an object it holds. */
  update(obj: Obj): void {
    const key = `${obj.metadata.namespace ?? ""}/${obj.metadata.name ?? ""}`;
    const old = this.objects.get(key);
    this.objects.set(key, obj);
    for (const h of this.handlers.get("update") ?? []) (h as unknown as (o: Obj, old: Obj | undefined) => void)(obj, old);
  }

  delete(obj: Obj): void {
    this.objects.delete(`${obj.metadata.namespace ?? ""}/${obj.metadata.name ?? ""}`);
    for (const h of this.handlers.get("delete") ?? []) h(obj);
  }
}

class Sink implements ArrivalSink {
  readonly told: Array<{ uid: string; at: number }> = [];
  arrived(uid: string, at: number): void {
    this.told.push({ uid, at });
  }
}

function sandbox(name: string, opts: { finalizers?: string[]; owner?: string } = {}): Obj {
  return {
    apiVersion: "agentcompute.dev/v1alpha1",
    kind: "Sandbox",
    metadata: {
      name,
      namespace: NS,
      uid: `uid-${name}`,
      resourceVersion: "7",
      labels: { [OWNER_LABEL]: opts.owner ?? ME },
      finalizers: opts.finalizers ?? [],
    },
  };
}

const ctx = (): ReconcileContext => ({ log: silentLogger(), reconcileId: "r", signal: new AbortController().signal, priority: true, retries: 0 });
const req = (obj: Obj): Request => ({ namespace: obj.metadata.namespace ?? "", name: obj.metadata.name ?? "" });

/** A replica with its Sandbox controller wired: what it enqueued, what it reconciled, where it looks up inventories. */
function replica(
  inventory: () => ArrivalSink | null | undefined,
  opts: {
    mayWork?: () => boolean;
    patch?: () => Promise<unknown>;
    list?: (path: string, o: { fieldSelector?: string }) => Promise<unknown>;
    work?: () => Promise<void>;
    publishInherits?: (inherited: readonly string[]) => Promise<void>;
  } = {},
) {
  const share = new Share();
  const shard = new ReplicaShard({
    identity: ME,
    logger: silentLogger(),
    controllers: SHARDED_CONTROLLERS,
    selectedByDefault: new Set(),
    ...(opts.mayWork && { mayWork: opts.mayWork }),
    ...(opts.publishInherits && { publishInherits: opts.publishInherits }),
  });
  shard.bind({
    // Only a release (a drain label) writes, with a merge patch.
    // Reads only with list (the operator's role has no get on these kinds).
    client: {
      patch: opts.patch ?? (() => Promise.reject(new Error("no write expected"))),
      list: opts.list ?? (() => Promise.reject(new Error("no read expected"))),
    } as unknown as KubeClient,
    informerFor: <T extends KubeObject>() => share as unknown as Informer<T>,
  });
  const lookups: string[] = [];
  shard.setInventories((kind, obj) => {
    lookups.push(`${kind.plural}/${obj.metadata.name ?? ""}`);
    return inventory();
  });
  const enqueued: Array<{ name: string; priority: boolean }> = [];
  const controller = {
    name: "sandbox",
    enqueue: (r: Request, o: { priority?: boolean } = {}) => enqueued.push({ name: r.name, priority: o.priority ?? false }),
  };
  shard.watch(controller as unknown as Controller);
  const reconciled: string[] = [];
  const inner: Reconciler = {
    reconcile: (r) => {
      reconciled.push(r.name);
      return opts.work?.() ?? Promise.resolve();
    },
  };
  const reconciler = shard.wrap("sandbox", inner);
  return { share, shard, enqueued, reconciled, lookups, reconcile: (obj: Obj) => reconciler.reconcile(req(obj), ctx()), resume: () => shard.resume() };
}

describe("ReplicaShard: objects that arrive from another owner", () => {
  it("tells the object's inventory once, with when it arrived, and puts it ahead of the backlog", async () => {
    const sink = new Sink();
    const r = replica(() => sink);
    const moved = sandbox("moved", { finalizers: ["agentcompute.dev/finalizer"] });
    const before = Date.now();
    r.share.add(moved);
    const after = Date.now();
    expect(r.enqueued).toEqual([{ name: "moved", priority: true }]);
    expect(sink.told).toEqual([]); // told when worked on, not when the watch delivers it

    await r.reconcile(moved);
    expect(r.reconciled).toEqual(["moved"]);
    expect(sink.told).toHaveLength(1);
    expect(sink.told[0]!.uid).toBe("uid-moved");
    expect(sink.told[0]!.at).toBeGreaterThanOrEqual(before);
    expect(sink.told[0]!.at).toBeLessThanOrEqual(after);

    await r.reconcile(moved);
    expect(r.reconciled).toEqual(["moved", "moved"]);
    expect(sink.told).toHaveLength(1);
  });

  it("does not tell anything of a new object (no finalizer yet: nobody can have made its service object)", async () => {
    const sink = new Sink();
    const r = replica(() => sink);
    const fresh = sandbox("fresh");
    r.share.add(fresh);
    await r.reconcile(fresh);
    expect(r.reconciled).toEqual(["fresh"]);
    expect(r.enqueued).toEqual([]); // the controller's own watch enqueues it, in its turn
    expect(r.lookups).toEqual([]);
    expect(sink.told).toEqual([]);
  });

  it("tells the inventory on a later reconcile when its Connection cannot be reached yet, with the first arrival time", async () => {
    const sink = new Sink();
    let reachable = false;
    const r = replica(() => (reachable ? sink : undefined));
    const moved = sandbox("waiting", { finalizers: ["agentcompute.dev/finalizer"] });
    const before = Date.now();
    r.share.add(moved);
    await r.reconcile(moved);
    expect(r.reconciled).toEqual(["waiting"]); // the reconcile says why the Connection is not usable
    expect(sink.told).toEqual([]);

    reachable = true;
    await new Promise((resolve) => setTimeout(resolve, 20));
    await r.reconcile(moved);
    expect(sink.told).toHaveLength(1);
    expect(sink.told[0]!.at).toBeGreaterThanOrEqual(before);
    expect(sink.told[0]!.at).toBeLessThan(Date.now() - 10);
    await r.reconcile(moved);
    expect(sink.told).toHaveLength(1);
    expect(r.lookups).toEqual(["sandboxes/waiting", "sandboxes/waiting"]);
  });

  it("forgets an arrival with no inventory (null), and one deleted before it was worked on", async () => {
    const r = replica(() => null);
    const moved = sandbox("no-inventory", { finalizers: ["agentcompute.dev/finalizer"] });
    r.share.add(moved);
    await r.reconcile(moved);
    await r.reconcile(moved);
    expect(r.lookups).toEqual(["sandboxes/no-inventory"]);

    const sink = new Sink();
    const r2 = replica(() => sink);
    const gone = sandbox("gone", { finalizers: ["agentcompute.dev/finalizer"] });
    r2.share.add(gone);
    r2.share.delete(gone);
    r2.share.add({ ...gone, metadata: { ...gone.metadata, finalizers: [] } }); // made again, new
    await r2.reconcile(gone);
    expect(sink.told).toEqual([]);
  });

  it("never works on an object its cache holds for another owner", async () => {
    const sink = new Sink();
    const r = replica(() => sink);
    const other = sandbox("other", { finalizers: ["agentcompute.dev/finalizer"], owner: "replica-b" });
    r.share.add(other);
    await r.reconcile(other);
    expect(r.reconciled).toEqual([]);
    expect(sink.told).toEqual([]);
  });
});

describe("ReplicaShard: a fenced member's share, before any of it moves (succession)", () => {
  const OTHER = "replica-b";
  const GONE = "replica-gone";
  const heirsRing = new Ring([ME, OTHER]);
  const view = (holders: string[], heirs: Record<string, string[]>): SuccessionView => ({ holders: new Set(holders), heirs: new Map(Object.entries(heirs)) });
  const inherited = Array.from({ length: 40 }, (_, i) => sandbox(`inherited-${i}`, { finalizers: ["agentcompute.dev/finalizer"], owner: GONE }));
  const heirOf = (obj: Obj): string | undefined => heirsRing.owner(`sandboxes/${NS}/${obj.metadata.name ?? ""}`);

  it("selects the fenced member's label too, and works on what the heirs' ring gives it, ahead of its backlog; never on the other heir's part", async () => {
    const sink = new Sink();
    const r = replica(() => sink);
    for (const obj of inherited) r.share.add(obj); // held while its owner was live: not its work
    await r.reconcile(inherited[0]!);
    expect(r.reconciled).toEqual([]);
    r.enqueued.length = 0;

    r.shard.setSuccession(view([ME, OTHER], { [GONE]: [ME, OTHER] }));
    expect(r.share.selectors).toEqual([`${OWNER_LABEL} in (${ME},${GONE})`]);
    // Listing under it: until that list is in, the caches are not all there is.
    expect(r.shard.ownsAny()).toBe(true);
    r.share.relisted();
    const mine = inherited.filter((o) => heirOf(o) === ME).map((o) => o.metadata.name);
    expect(mine.length).toBeGreaterThan(5);
    expect(mine.length).toBeLessThan(inherited.length - 5);
    // Those already cached are looked at now, first; told to their inventories as arrivals.
    expect(r.enqueued).toEqual(mine.map((name) => ({ name, priority: true })));
    for (const obj of inherited) await r.reconcile(obj);
    expect(r.reconciled).toEqual(mine);
    expect(sink.told.map((t) => t.uid)).toEqual(mine.map((name) => `uid-${name}`));
  });

  it("says which cached objects it works on (its per-kind metrics count those only): its own and its part of the fenced member's, not the other heir's", () => {
    const r = replica(() => null);
    const path = SHARDED_CONTROLLERS.get("sandbox")!.path;
    const own = sandbox("own");
    const foreign = sandbox("foreign", { owner: OTHER });
    for (const obj of [own, foreign, ...inherited]) r.share.add(obj);
    r.shard.setSuccession(view([ME, OTHER], { [GONE]: [ME, OTHER] }));
    expect(r.shard.worksOn(path, own)).toBe(true);
    expect(r.shard.worksOn(path, foreign)).toBe(false);
    expect(inherited.filter((o) => r.shard.worksOn(path, o))).toEqual(inherited.filter((o) => heirOf(o) === ME));
    // A kind that is not sharded is all this replica's.
    expect(r.shard.worksOn("/apis/agentcompute.dev/v1alpha1/connections", foreign)).toBe(true);
  });

  it("works on an object relabelled to it while its cache held it (an heir's chain ended), as one that arrives now", async () => {
    const sink = new Sink();
    const r = replica(() => sink);
    // The other heir left (its Lease deleted, its work stopped): its part of the fenced
    // member's objects has no worker until the sharder labels them.
    r.shard.setSuccession(view([ME], { [GONE]: [ME, OTHER] }));
    r.share.relisted();
    const orphan = inherited.find((o) => heirOf(o) === OTHER)!;
    r.share.add(orphan);
    await r.reconcile(orphan);
    expect(r.reconciled).toEqual([]);
    r.enqueued.length = 0;
    await new Promise((resolve) => setTimeout(resolve, 20));
    const relabelledAt = Date.now();
    r.share.update({ ...orphan, metadata: { ...orphan.metadata, resourceVersion: "8", labels: { [OWNER_LABEL]: ME } } });
    expect(r.enqueued).toEqual([{ name: orphan.metadata.name, priority: true }]);
    await r.reconcile(orphan);
    expect(r.reconciled).toEqual([orphan.metadata.name]);
    // Its arrival is the relabelling, not when the cache first held it.
    expect(sink.told).toHaveLength(1);
    expect(sink.told[0]!.at).toBeGreaterThanOrEqual(relabelledAt);
  });

  it("says what it inherits (on its member Lease) before it works on any of it (its caches list it meanwhile), and says less only once it stopped", async () => {
    const said: string[][] = [];
    let done: () => void = () => undefined;
    const r = replica(() => null, {
      publishInherits: (inherited) => {
        said.push([...inherited]);
        return new Promise<void>((resolve) => (done = resolve));
      },
    });
    for (const obj of inherited) r.share.add(obj);
    r.shard.setSuccession(view([ME, OTHER], { [GONE]: [ME, OTHER] }));
    // A later view that adds nothing waits too: nothing is worked on before it is said.
    r.shard.setSuccession(view([ME, OTHER, "replica-new"], { [GONE]: [ME, OTHER] }));
    expect(said).toEqual([[GONE]]);
    // Its caches list the fenced member's objects meanwhile (caching is not working on them).
    expect(r.share.selectors).toEqual([`${OWNER_LABEL} in (${ME},${GONE})`]);
    r.share.relisted();
    for (const obj of inherited) await r.reconcile(obj);
    expect(r.reconciled).toEqual([]);

    done();
    await new Promise((resolve) => setTimeout(resolve, 0));
    expect(r.share.selectors).toHaveLength(1);
    for (const obj of inherited) await r.reconcile(obj);
    expect(r.reconciled).toEqual(inherited.filter((o) => heirOf(o) === ME).map((o) => o.metadata.name));

    // The fenced Lease collected (nothing carries its label): it stops, then says so.
    r.shard.setSuccession(view([ME, OTHER], {}));
    expect(r.share.selectors.at(-1)).toBe(`${OWNER_LABEL}=${ME}`);
    expect(said).toEqual([[GONE], []]);
  });

  it("follows an heir that died too, and stops at a member that holds its Lease again", async () => {
    const r = replica(() => null);
    for (const obj of inherited) r.share.add(obj);
    // The other heir was fenced in turn, with this replica as its only heir: all of it.
    r.shard.setSuccession(view([ME], { [GONE]: [ME, OTHER], [OTHER]: [ME] }));
    expect(r.share.selectors.at(-1)).toBe(`${OWNER_LABEL} in (${ME},${OTHER},${GONE})`);
    for (const obj of inherited) await r.reconcile(obj);
    expect(r.reconciled).toHaveLength(inherited.length);

    // The gone member's identity holds its Lease again (possible only once nothing carried its
    // label; here, to show that a held Lease ends the succession): none of it is this replica's.
    r.reconciled.length = 0;
    r.shard.setSuccession(view([ME, GONE], {}));
    expect(r.share.selectors.at(-1)).toBe(`${OWNER_LABEL}=${ME}`);
    for (const obj of inherited) await r.reconcile(obj);
    expect(r.reconciled).toEqual([]);
  });
});

describe("ReplicaShard: a membership that is not current", () => {
  it("sets its objects aside instead of working on them, and looks at them first once it has joined", async () => {
    let member = false; // not joined yet, or a renewal overdue
    const sink = new Sink();
    const r = replica(() => sink, { mayWork: () => member });
    const mine = sandbox("mine", { finalizers: ["agentcompute.dev/finalizer"] });
    r.share.add(mine);
    r.enqueued.length = 0;
    expect(await r.reconcile(mine)).toBeUndefined(); // no requeue: not polled while it waits
    expect(r.reconciled).toEqual([]);
    expect(sink.told).toEqual([]);

    member = true;
    r.resume();
    expect(r.enqueued).toEqual([{ name: "mine", priority: true }]);
    await r.reconcile(mine);
    expect(r.reconciled).toEqual(["mine"]);
    expect(sink.told).toHaveLength(1);
  });
});

describe("ReplicaShard: whether it owns anything (a restarted identity joins only once it owns nothing)", () => {
  it("answers from its own informers: yes while one has not synced or holds an object", () => {
    const r = replica(() => null);
    r.share.synced = false;
    expect(r.shard.ownsAny()).toBe(true);
    r.share.synced = true;
    expect(r.shard.ownsAny()).toBe(false);
    const left = sandbox("left-behind");
    r.share.add(left);
    expect(r.shard.ownsAny()).toBe(true);
    r.share.delete(left); // moved: it left the label-selected watch
    expect(r.shard.ownsAny()).toBe(false);
  });
});

describe("ReplicaShard: a membership that lapses mid-reconcile", () => {
  it("sets aside an object whose reconcile a write refused by the gate cut short, rather than failing it", async () => {
    let member = true;
    let failure: Error | undefined;
    const r = replica(() => null, {
      mayWork: () => member,
      // The membership lapses while the reconcile runs, and its next write is refused.
      work: () => {
        if (failure === undefined) return Promise.resolve();
        member = false;
        return Promise.reject(failure);
      },
    });
    const mine = sandbox("mine");
    r.share.add(mine);
    // Refused by the gate, as the reconciler rethrows it (a retry no later than the VM's renewal).
    failure = new RetryNoLaterThan(new MembershipLapsed(), 5_000, true);
    await expect(r.reconcile(mine)).resolves.toBeUndefined();
    expect(r.enqueued).toEqual([]);
    member = true;
    r.resume();
    expect(r.enqueued).toEqual([{ name: "mine", priority: true }]);
    // Any other failure is the object's: the controller retries and reports it.
    member = true;
    failure = new Error("the service said no");
    await expect(r.reconcile(mine)).rejects.toThrow("the service said no");
  });

  it("looks at it again at once if the membership is current again by then (resumed while the reconcile waited)", async () => {
    const r = replica(() => null, { mayWork: () => true, work: () => Promise.reject(new MembershipLapsed()) });
    const mine = sandbox("mine");
    r.share.add(mine);
    await expect(r.reconcile(mine)).resolves.toEqual({ requeue: true, priority: true });
  });
});

describe("ReplicaShard: a drain that cannot be acknowledged", () => {
  const draining = (): Obj => {
    const obj = sandbox("draining", { finalizers: ["agentcompute.dev/finalizer"] });
    obj.metadata.labels = { ...obj.metadata.labels, [DRAIN_LABEL]: "true" };
    return obj;
  };
  const refused = () => Promise.reject(new Error("the API server answered 503"));
  /** A read back by list: what the API server holds under that name, and what was asked for. */
  const readBack = (...items: Obj[]) => {
    const asked: string[] = [];
    return {
      asked,
      list: (path: string, o: { fieldSelector?: string }) => {
        asked.push(`${path}?${o.fieldSelector ?? ""}`);
        return Promise.resolve({ items });
      },
    };
  };
  const ASKED = `/apis/agentcompute.dev/v1alpha1/namespaces/${NS}/sandboxes?metadata.name=draining`;

  it("keeps working on the object it still owns (a renewal must not wait), and tries the release again within a second", async () => {
    const obj = draining();
    const back = readBack(obj); // unchanged
    const r = replica(() => null, { patch: refused, list: back.list });
    r.share.add(obj);
    expect(await r.reconcile(obj)).toEqual({ requeueAfterMs: 1_000, priority: true });
    expect(r.reconciled).toEqual(["draining"]);
    expect(back.asked).toEqual([ASKED]);
  });

  it("an heir keeps working on an inherited object (the fenced member's label on it) whose drain it could not acknowledge", async () => {
    const obj = draining();
    obj.metadata.labels = { ...obj.metadata.labels, [OWNER_LABEL]: "replica-gone" };
    const r = replica(() => null, { patch: refused, list: readBack(obj).list });
    r.shard.setSuccession({ holders: new Set([ME]), heirs: new Map([["replica-gone", [ME]]]) });
    r.share.relisted();
    r.share.add(obj);
    expect(await r.reconcile(obj)).toEqual({ requeueAfterMs: 1_000, priority: true });
    expect(r.reconciled).toEqual(["draining"]);
  });

  it("sends the release again when the object reads back unchanged, and does not work on it when that one lands", async () => {
    const obj = draining();
    const back = readBack(obj); // unchanged: the first PATCH has not landed (yet)
    const sent: unknown[] = [];
    const patch = (_path: string, body: unknown) => {
      sent.push(body);
      return sent.length === 1 ? Promise.reject(new Error("timed out after 30000 ms")) : Promise.resolve(undefined);
    };
    const r = replica(() => null, { patch: patch as () => Promise<unknown>, list: back.list });
    r.share.add(obj);
    expect(await r.reconcile(obj)).toBeUndefined();
    expect(r.reconciled).toEqual([]);
    // The same release both times, on the version read: the first can no longer land after the second.
    expect(sent).toHaveLength(2);
    expect(sent[1]).toEqual(sent[0]);
    expect(sent[0]).toMatchObject({ metadata: { resourceVersion: "7" } });
  });

  it("nor when the second attempt meets a newer version (the first landed meanwhile): it looks again", async () => {
    const obj = draining();
    let calls = 0;
    const conflict = new KubeApiError({ status: 409, reason: "Conflict", message: "the object has been modified", method: "PATCH", path: "/x" });
    const patch = () => (++calls === 1 ? Promise.reject(new Error("socket hang up")) : Promise.reject(conflict));
    const r = replica(() => null, { patch, list: readBack(obj).list });
    r.share.add(obj);
    expect(await r.reconcile(obj)).toEqual({ requeue: true });
    expect(r.reconciled).toEqual([]);
    expect(calls).toBe(2);
  });

  it("does not work on it when the release landed with its answer lost", async () => {
    const obj = draining();
    const back = readBack({ ...obj, metadata: { ...obj.metadata, resourceVersion: "8", labels: {} } });
    const r = replica(() => null, { patch: refused, list: back.list });
    r.share.add(obj);
    expect(await r.reconcile(obj)).toEqual({ requeueAfterMs: 1_000, priority: true });
    expect(r.reconciled).toEqual([]);
  });

  it("nor when the name is now another object's (deleted and created again), nor when it cannot be read back", async () => {
    const obj = draining();
    for (const list of [readBack({ ...obj, metadata: { ...obj.metadata, uid: "another" } }).list, () => Promise.reject(new Error("503"))]) {
      const r = replica(() => null, { patch: refused, list });
      r.share.add(obj);
      expect(await r.reconcile(obj)).toEqual({ requeueAfterMs: 1_000, priority: true });
      expect(r.reconciled).toEqual([]);
    }
  });
});

describe("arrivalInventory: where a moved-in object's service objects are found", () => {
  const ref = { name: "prod" };
  it("maps each sharded kind to its Connection's inventory of that kind", () => {
    expect(arrivalInventory(kindNames.skill.plural, { connectionRef: ref })).toEqual({ inventory: "skills", connectionRef: ref });
    expect(arrivalInventory(kindNames.agent.plural, {})).toEqual({ inventory: "agents", connectionRef: undefined });
    expect(arrivalInventory(kindNames.agentDeployment.plural, { connectionRef: ref })).toEqual({ inventory: "deployments", connectionRef: ref });
    expect(arrivalInventory(kindNames.sandbox.plural, { connectionRef: ref })).toEqual({ inventory: "vms", connectionRef: ref });
  });

  it("looks a run with a template up among the VMs of its template's Connection; a run on a Sandbox has none", () => {
    expect(arrivalInventory(kindNames.sandboxRun.plural, { sandboxTemplate: { connectionRef: ref } })).toEqual({ inventory: "vms", connectionRef: ref });
    expect(arrivalInventory(kindNames.sandboxRun.plural, { sandboxTemplate: {} })).toEqual({ inventory: "vms", connectionRef: undefined });
    expect(arrivalInventory(kindNames.sandboxRun.plural, {})).toBeNull();
  });

  it("covers every sharded kind, and nothing else", () => {
    for (const kind of SHARDED_CONTROLLERS.values()) {
      const where = arrivalInventory(kind.plural, { sandboxTemplate: {} });
      expect(where, kind.plural).not.toBeNull();
    }
    expect(arrivalInventory(kindNames.connection.plural, {})).toBeNull();
  });
});
