// The sharder on a real API server: when a replica is gone, its Sandboxes with a running VM
// (status.vmId) are moved before anything else of its share, of any kind, and a new leader's
// sharder does not wait for the other kinds' caches to move them. Their renewals stop until
// they move; the rest loses nothing by waiting (src/sharding/urgent.ts). What is asserted is
// the order of the moves' PATCHes as the API server answered them.
import { beforeAll, describe, expect, it } from "vitest";
import { GROUP, VERSION, kindNames } from "../../../src/api/names.js";
import { KubeApiError, resourcePath, type KubeClient, type KubeObject } from "../../../src/runtime/kube-client.js";
import { Informer } from "../../../src/runtime/informer.js";
import { Metrics } from "../../../src/runtime/metrics.js";
import { REFERENCE_VIEW } from "../../../src/controllers/reference-view.js";
import { SHARDED_CONTROLLERS } from "../../../src/sharding/index.js";
import { releasePatch } from "../../../src/sharding/assignment.js";
import { DRAIN_LABEL, OWNER_LABEL } from "../../../src/sharding/labels.js";
import { Ring, objectKey } from "../../../src/sharding/ring.js";
import { Sharder, type ShardedObject, type SharderOptions } from "../../../src/sharding/sharder.js";
import { clientFor, poll, testLogger } from "../runtime/support.js";
import { adminAndNamespaces } from "./support.js";

const DEAD = "replica-dead";
const LIVE = ["replica-a", "replica-b"];
const EACH = 4;

type Labelled = KubeObject & { metadata: { name?: string; labels?: Record<string, string>; resourceVersion?: string } };

const path = (plural: string, namespace: string, name?: string, subresource?: string): string =>
  resourcePath({ group: GROUP, version: VERSION, plural, namespace, ...(name !== undefined && { name }), ...(subresource !== undefined && { subresource }) });

/** Skills, Agents, Sandboxes with a VM and Sandboxes without one yet; labelled for `owner` if given. */
function objects(namespace: string, owner?: string): Array<{ plural: string; body: object; vmId?: string }> {
  const metadata = (name: string) => ({ name, namespace, ...(owner !== undefined && { labels: { [OWNER_LABEL]: owner } }) });
  const out: Array<{ plural: string; body: object; vmId?: string }> = [];
  for (let i = 0; i < EACH; i++) {
    out.push({ plural: kindNames.skill.plural, body: { apiVersion: `${GROUP}/${VERSION}`, kind: "Skill", metadata: metadata(`sk-${i}`), spec: { description: "d", content: "# c\n" } } });
    out.push({ plural: kindNames.agent.plural, body: { apiVersion: `${GROUP}/${VERSION}`, kind: "Agent", metadata: metadata(`ag-${i}`), spec: { image: "ghcr.io/acme/a:1.0.0" } } });
    out.push({ plural: kindNames.sandbox.plural, body: { apiVersion: `${GROUP}/${VERSION}`, kind: "Sandbox", metadata: metadata(`sbx-running-${i}`), spec: { tier: "standard" } }, vmId: `vm-${i}` });
    out.push({ plural: kindNames.sandbox.plural, body: { apiVersion: `${GROUP}/${VERSION}`, kind: "Sandbox", metadata: metadata(`sbx-new-${i}`), spec: { tier: "standard" } } });
  }
  return out;
}

type Move = { at: "sent" | "answered"; object: string; time?: number };

/** Holds the PATCHes of the objects `of` picks until let go, one at a time or all. */
class PatchHold {
  /** How many PATCHes were held so far. */
  count = 0;
  private readonly waiting: Array<() => void> = [];
  private open = false;
  constructor(readonly of: (object: string) => boolean) {}
  async hold(): Promise<void> {
    if (this.open) return;
    this.count++;
    await new Promise<void>((resolve) => this.waiting.push(resolve));
  }
  /** The PATCH held longest goes. */
  releaseOne(): void {
    this.waiting.shift()?.();
  }
  releaseAll(): void {
    this.open = true;
    for (const go of this.waiting.splice(0)) go();
  }
}

/**
 * A Sharder over `namespace` whose PATCHes are recorded as they are sent and as they are
 * answered. With `holdLists`, the LISTs of every kind but the Sandboxes are answered only once
 * it resolves.
 */
function recordingSharder(
  namespace: string,
  holdLists?: Promise<void>,
  holdPatches?: PatchHold,
  /** Objects whose next PATCH is answered 409, as if the object had changed meanwhile. */
  conflicts = new Set<string>(),
  options: Partial<SharderOptions> = {},
  /** Objects whose next PATCHes (so many) fail as an API server in trouble fails them (500). */
  failures = new Map<string, number>(),
): { sharder: Sharder; moves: Move[]; metrics: Metrics; close(): Promise<void> } {
  const client = clientFor();
  const moves: Move[] = [];
  if (holdLists !== undefined) {
    const list = client.list.bind(client);
    client.list = (async (p: string, opts?: Parameters<KubeClient["list"]>[1]) => {
      if (!p.includes(`/${kindNames.sandbox.plural}`)) await holdLists;
      return list(p, opts);
    }) as KubeClient["list"];
  }
  const patch = client.patch.bind(client) as (p: string, b: unknown, t: "merge", o: { discardResult: true }) => Promise<void>;
  client.patch = (async (p: string, body: unknown, type: "merge", opts: { discardResult: true }) => {
    const object = p.split("/").slice(-2).join("/"); // plural/name
    if (holdPatches?.of(object)) await holdPatches.hold();
    moves.push({ at: "sent", object, time: performance.now() });
    if (conflicts.delete(object)) throw new KubeApiError({ status: 409, reason: "Conflict", message: "the object has been modified", method: "PATCH", path: p });
    const failing = failures.get(object) ?? 0;
    if (failing > 0) {
      failures.set(object, failing - 1);
      throw new KubeApiError({ status: 500, reason: "InternalError", message: "etcdserver: request timed out", method: "PATCH", path: p });
    }
    await patch(p, body, type, opts);
    moves.push({ at: "answered", object });
  }) as KubeClient["patch"];
  const metrics = new Metrics({ defaultMetrics: false });
  const sharder = new Sharder({ client, logger: testLogger(), metrics, namespaces: [namespace], kinds: [...SHARDED_CONTROLLERS.values()], ...options });
  return {
    sharder,
    moves,
    metrics,
    close: async () => {
      await sharder.stop();
      await client.close();
    },
  };
}

const running = (object: string): boolean => object.startsWith(`${kindNames.sandbox.plural}/sbx-running-`);

/** Every move of a Sandbox with a VM was answered before any other move was sent. */
function expectRunningFirst(moves: Move[], objects: readonly string[]): void {
  const answered = moves.filter((m) => m.at === "answered");
  expect(new Set(answered.map((m) => m.object))).toEqual(new Set(objects));
  expect(moves.filter((m) => m.at === "sent"), "one PATCH per move").toHaveLength(objects.length);
  const lastRunningAnswered = moves.findLastIndex((m) => m.at === "answered" && running(m.object));
  const firstOtherSent = moves.findIndex((m) => m.at === "sent" && !running(m.object));
  expect(lastRunningAnswered, JSON.stringify(moves)).toBeGreaterThanOrEqual(0);
  expect(lastRunningAnswered, JSON.stringify(moves)).toBeLessThan(firstOtherSent);
}

async function createAll(admin: KubeClient, namespace: string, owner?: string): Promise<string[]> {
  const names: string[] = [];
  for (const o of objects(namespace, owner)) {
    const name = (o.body as { metadata: { name: string } }).metadata.name;
    await admin.create(path(o.plural, namespace), o.body, { discardResult: true });
    if (o.vmId !== undefined) await admin.patch(path(o.plural, namespace, name, "status"), { status: { vmId: o.vmId, state: "running" } }, "merge", { discardResult: true });
    names.push(`${o.plural}/${name}`);
  }
  return names;
}

async function ownersOf(admin: KubeClient, namespace: string): Promise<Map<string, string | undefined>> {
  const out = new Map<string, string | undefined>();
  for (const plural of [kindNames.skill.plural, kindNames.agent.plural, kindNames.sandbox.plural]) {
    for (const o of (await admin.list<Labelled>(path(plural, namespace))).items) out.set(`${plural}/${o.metadata.name ?? ""}`, o.metadata.labels?.[OWNER_LABEL]);
  }
  return out;
}

/** Waits until the live replicas' shares add up to every object. */
const allPlacedOnLive = (sharder: Sharder, count: number, description: string): Promise<void> =>
  poll(() => LIVE.reduce((n, m) => n + (sharder.shares().get(m) ?? 0), 0) === count, 60_000, description);

describe("Sharder (real API server): a fenced replica's objects go to the heirs its fence names", () => {
  const suite = adminAndNamespaces("sharder-heirs");
  let admin: KubeClient;
  beforeAll(() => {
    admin = suite.admin();
  });

  it("labels each with the heir already working on it, not the ring's choice since a replica joined; then drains it there", async () => {
    const ns = await suite.namespace();
    const all = await createAll(admin, ns, DEAD);
    const JOINED = "replica-c"; // joined after the fence: not an heir
    const heirs = new Ring(LIVE);
    const now = new Ring([...LIVE, JOINED]);
    const key = (object: string): string => objectKey(object.split("/")[0]!, ns, object.split("/")[1]!);
    expect(all.some((o) => now.owner(key(o)) === JOINED)).toBe(true);
    const r = recordingSharder(ns);
    try {
      r.sharder.setSuccession({ holders: new Set([...LIVE, JOINED]), heirs: new Map([[DEAD, LIVE]]) });
      r.sharder.setMembers([...LIVE, JOINED]);
      await r.sharder.start();
      await allPlacedOnLive(r.sharder, all.length, "every object labelled with a live heir");
      // What the ring now gives the joined replica is asked to drain from its heir (no replica
      // runs here to acknowledge it), the rest stays where it is.
      await poll(
        async () => {
          const drains = (await Promise.all([kindNames.skill.plural, kindNames.agent.plural, kindNames.sandbox.plural].map((p) => admin.list<Labelled>(path(p, ns)))))
            .flatMap((l) => l.items)
            .filter((o) => o.metadata.labels?.[DRAIN_LABEL] !== undefined).length;
          return drains === all.filter((o) => now.owner(key(o)) !== heirs.owner(key(o))).length;
        },
        30_000,
        "the drains towards the joined replica",
      );
    } finally {
      await r.close();
    }
    for (const [object, owner] of await ownersOf(admin, ns)) expect(owner, object).toBe(heirs.owner(key(object)));
  });
});

describe("Sharder (real API server): a gone replica's Sandboxes with a running VM move first", () => {
  const suite = adminAndNamespaces("sharder");
  const namespace = (): Promise<string> => suite.namespace();
  let admin: KubeClient;
  beforeAll(() => {
    admin = suite.admin();
  });

  it("when the sharder starts with the share of a replica that is gone (a new leader after the old one was killed)", async () => {
    const ns = await namespace();
    const all = await createAll(admin, ns, DEAD);
    const r = recordingSharder(ns);
    try {
      r.sharder.setMembers(LIVE);
      await r.sharder.start();
      await allPlacedOnLive(r.sharder, all.length, "every object moved to a live replica");
    } finally {
      await r.close();
    }
    expectRunningFirst(r.moves, all);
    for (const [object, owner] of await ownersOf(admin, ns)) expect(LIVE, object).toContain(owner);
  });

  it("a new leader's sharder moves the gone replica's running Sandboxes before the other kinds are even listed", async () => {
    const ns = await namespace();
    const all = await createAll(admin, ns, DEAD);
    let release: () => void = () => undefined;
    const r = recordingSharder(ns, new Promise<void>((resolve) => (release = resolve)));
    try {
      r.sharder.setMembers(LIVE);
      const started = r.sharder.start();
      // Only the Sandboxes' list is answered: their running VMs' renewals wait for nothing else.
      await poll(() => r.moves.filter((m) => m.at === "answered" && running(m.object)).length === EACH, 30_000, "the running Sandboxes moved");
      release();
      await started;
      await allPlacedOnLive(r.sharder, all.length, "every object moved to a live replica");
    } finally {
      release();
      await r.close();
    }
    expectRunningFirst(r.moves, all);
  });

  it("when a member goes while the sharder runs", async () => {
    const ns = await namespace();
    const all = await createAll(admin, ns);
    const r = recordingSharder(ns);
    try {
      r.sharder.setMembers(LIVE);
      await r.sharder.start();
      await allPlacedOnLive(r.sharder, all.length, "every object placed");
      // The watch may show a label before its PATCH is answered: wait for the answers too.
      await poll(() => r.moves.filter((m) => m.at === "answered").length === all.length, 30_000, "every placement answered");
      // The member to lose: one whose share holds a running Sandbox and something else.
      const placed = await ownersOf(admin, ns);
      const shareOf = (m: string): string[] => [...placed].filter(([, owner]) => owner === m).map(([o]) => o);
      const gone = LIVE.find((m) => shareOf(m).some(running) && shareOf(m).some((o) => !running(o)));
      expect(gone, JSON.stringify([...placed])).toBeDefined();
      const stays = LIVE.filter((m) => m !== gone);
      r.moves.length = 0;
      r.sharder.setMembers(stays);
      await poll(async () => [...(await ownersOf(admin, ns)).values()].every((o) => o !== undefined && stays.includes(o)), 60_000, "the gone member's share moved");
      expectRunningFirst(r.moves, shareOf(gone!));
    } finally {
      await r.close();
    }
  }, 180_000);

  /**
   * "a-released", first in the list and owned by the replica the ring picks (nothing to do for
   * it at the start), has a running VM; 40 new Sandboxes to place, more than the sharder's 16
   * workers, whose PATCHes `hold` holds. Returns once every worker holds one, and the owner has
   * let "a-released" go (as after a drain) and the sharder has seen it.
   */
  async function releasedBehindBacklog(ns: string, hold: PatchHold, conflicts?: Set<string>) {
    const owner = new Ring(LIVE).owner(objectKey(kindNames.sandbox.plural, ns, RELEASED))!;
    const sandboxes = path(kindNames.sandbox.plural, ns);
    const sandbox = (name: string, labels?: Record<string, string>) => ({ apiVersion: `${GROUP}/${VERSION}`, kind: "Sandbox", metadata: { name, labels }, spec: { tier: "standard" } });
    await admin.create(sandboxes, sandbox(RELEASED, { [OWNER_LABEL]: owner }), { discardResult: true });
    await admin.patch(path(kindNames.sandbox.plural, ns, RELEASED, "status"), { status: { vmId: "vm-released", state: "running" } }, "merge", { discardResult: true });
    for (let i = 0; i < BACKLOG; i++) await admin.create(sandboxes, sandbox(`sbx-backlog-${i}`), { discardResult: true });
    const r = recordingSharder(ns, undefined, hold, conflicts);
    r.sharder.setMembers(LIVE);
    await r.sharder.start();
    await poll(() => hold.count === 16, 30_000, "every worker on a held placement");
    // Nobody renews its VM until it is placed.
    await admin.patch(`${sandboxes}/${RELEASED}`, releasePatch(undefined), "merge", { discardResult: true });
    await poll(() => (r.sharder.shares().get(owner) ?? 0) === 0, 30_000, "the release seen by the sharder");
    return r;
  }
  const RELEASED = "a-released";
  const BACKLOG = 40;
  const isBacklog = (o: string): boolean => o.includes("/sbx-backlog-");
  const sentOrder = (moves: Move[]): string[] => moves.filter((m) => m.at === "sent").map((m) => m.object.split("/")[1]!);
  /** Lets every held PATCH go, and waits for every placement's answer. */
  const everyPlacement = async (r: { moves: Move[] }, hold: PatchHold): Promise<void> => {
    hold.releaseAll();
    await poll(() => r.moves.filter((m) => m.at === "answered").length === BACKLOG + 1, 60_000, "every placement answered");
  };

  it("places a Sandbox its owner let go of with a running VM (a drain acknowledged) ahead of a backlog of placements", async () => {
    const hold = new PatchHold(isBacklog);
    const r = await releasedBehindBacklog(await namespace(), hold);
    try {
      await everyPlacement(r, hold);
    } finally {
      hold.releaseAll();
      await r.close();
    }
    const sent = sentOrder(r.moves);
    // Only the placements the workers held were sent before it, not the other 24 queued before it.
    expect(sent.indexOf(RELEASED), JSON.stringify(sent)).toBeLessThanOrEqual(16);
  });

  it("retries such a placement refused with 409 (the object changed meanwhile) ahead of the backlog too", async () => {
    const hold = new PatchHold(isBacklog);
    const r = await releasedBehindBacklog(await namespace(), hold, new Set([`${kindNames.sandbox.plural}/${RELEASED}`]));
    const adds = async (): Promise<number> => (await r.metrics.workqueueAdds.get()).values.find((v) => v.labels.name === "sharder-sandboxes")?.value ?? 0;
    try {
      const before = await adds();
      // One worker is free: it places "a-released", which is refused; it goes on to the backlog.
      hold.releaseOne();
      // Two adds: the placed Sandbox's label change, through the watch, and the retry after its backoff.
      await poll(async () => hold.count === 17 && (await adds()) >= before + 2, 30_000, "the refused placement queued again");
      // The next free worker takes the retry, not the backlog queued before it.
      hold.releaseOne();
      await poll(() => r.moves.some((m) => m.at === "answered" && m.object.endsWith(`/${RELEASED}`)), 30_000, "the retry answered");
      await everyPlacement(r, hold);
    } finally {
      hold.releaseAll();
      await r.close();
    }
    const sent = sentOrder(r.moves);
    expect(sent.slice(0, 4).map((o) => (o === RELEASED ? o : "backlog")), JSON.stringify(sent)).toEqual(["backlog", RELEASED, "backlog", RELEASED]);
  });

  it("lets a move already waiting behind the urgent ones go once its Sandbox is let go with a running VM", async () => {
    const ns = await namespace();
    const sandboxes = path(kindNames.sandbox.plural, ns);
    const sandbox = (name: string, owner: string) => ({ apiVersion: `${GROUP}/${VERSION}`, kind: "Sandbox", metadata: { name, labels: { [OWNER_LABEL]: owner } }, spec: { tier: "standard" } });
    const running = async (name: string, owner: string): Promise<void> => {
      await admin.create(sandboxes, sandbox(name, owner), { discardResult: true });
      await admin.patch(path(kindNames.sandbox.plural, ns, name, "status"), { status: { vmId: `vm-${name}`, state: "running" } }, "merge", { discardResult: true });
    };
    // The gone replica's running Sandbox: the urgent move, held. And one of a live owner, which
    // waits behind it (its worker in the urgent set's wait; no deadline to speak of here).
    await running("gone", DEAD);
    const owner = new Ring(LIVE).owner(objectKey(kindNames.sandbox.plural, ns, RELEASED))!;
    await running(RELEASED, owner);
    const hold = new PatchHold((o) => o.endsWith("/gone"));
    const r = recordingSharder(ns, undefined, hold, undefined, { urgentMaxWaitMs: 600_000 });
    const active = async (): Promise<number> => (await r.metrics.activeWorkers.get()).values.find((v) => v.labels.controller === "sharder-sandboxes")?.value ?? 0;
    try {
      r.sharder.setMembers(LIVE);
      await r.sharder.start();
      await poll(async () => hold.count === 1 && (await active()) === 2, 30_000, "the urgent move held, and the other waiting");
      // Its owner lets it go (a drain acknowledged): nobody renews its VM now.
      await admin.patch(`${sandboxes}/${RELEASED}`, releasePatch(undefined), "merge", { discardResult: true });
      await poll(() => r.moves.some((m) => m.at === "answered" && m.object.endsWith(`/${RELEASED}`)), 30_000, "the let-go Sandbox placed while the urgent move is held");
    } finally {
      hold.releaseAll();
      await r.close();
    }
  });
});

describe("Sharder (real API server): a placement the API server keeps failing", () => {
  const suite = adminAndNamespaces("sharder-failing");
  let admin: KubeClient;
  beforeAll(() => {
    admin = suite.admin();
  });

  it("is tried again within seconds for a Sandbox whose running VM nobody renews, however many times it failed, not after a backoff grown past the VM's expiry", async () => {
    const ns = await suite.namespace();
    const name = "unrenewed";
    await admin.create(path(kindNames.sandbox.plural, ns), { apiVersion: `${GROUP}/${VERSION}`, kind: "Sandbox", metadata: { name }, spec: { tier: "standard" } }, { discardResult: true });
    await admin.patch(path(kindNames.sandbox.plural, ns, name, "status"), { status: { vmId: "vm-unrenewed", state: "running" } }, "merge", { discardResult: true });
    // 13 failures: the queue's own backoff (5 ms doubling) would wait 20 s before the last try
    // alone, and some 40 s in all.
    const r = recordingSharder(ns, undefined, undefined, undefined, {}, new Map([[`${kindNames.sandbox.plural}/${name}`, 13]]));
    try {
      r.sharder.setMembers(LIVE);
      await r.sharder.start();
      await poll(() => r.moves.some((m) => m.at === "answered"), 90_000, "the placement answered");
    } finally {
      await r.close();
    }
    const tries = r.moves.filter((m) => m.at === "sent").map((m) => m.time ?? 0);
    expect(tries).toHaveLength(14);
    // Each try within seconds of the one before (at most 2 s asked; the backoff's last wait would be 20 s).
    const longest = Math.max(...tries.slice(1).map((t, i) => t - (tries[i] ?? t)));
    expect(longest).toBeLessThan(8_000);
  }, 90_000);
});

describe("Sharder (real API server): the Connections' users", () => {
  const suite = adminAndNamespaces("sharder-users");

  it("counts a template SandboxRun as its Connection's user until its VM is given back, and a sandboxRef run never; says when one lets go", async () => {
    const admin = suite.admin();
    const ns = await suite.namespace();
    const runs = path(kindNames.sandboxRun.plural, ns);
    const run = (name: string, spec: object) => ({ apiVersion: `${GROUP}/${VERSION}`, kind: "SandboxRun", metadata: { name }, spec: { ...spec, steps: [{ name: "s", command: "true" }] } });
    await admin.create(runs, run("holding", { sandboxTemplate: { tier: "standard" } }), { discardResult: true });
    await admin.create(runs, run("elsewhere", { sandboxTemplate: { tier: "standard", connectionRef: { name: "other" } } }), { discardResult: true });
    await admin.create(runs, run("given-back", { sandboxTemplate: { tier: "standard" } }), { discardResult: true });
    await admin.patch(path(kindNames.sandboxRun.plural, ns, "given-back", "status"), { status: { phase: "Succeeded", vmReleased: true } }, "merge", { discardResult: true });
    await admin.create(runs, run("in-a-sandbox", { sandboxRef: { name: "box" } }), { discardResult: true });
    // The Connection controller (the leader's) is told of each user letting go, whichever
    // replica owns it: its own informer of runs holds only the leader's share.
    const letGo: string[] = [];
    const r = recordingSharder(ns, undefined, undefined, undefined, { onLetGo: (kind, namespace, connection) => letGo.push(`${kind.kind} ${namespace}/${connection}`) });
    try {
      r.sharder.setMembers(LIVE);
      await r.sharder.start();
      expect(r.sharder.usersOf(ns, "default")).toEqual(["SandboxRun/holding"]);
      expect(r.sharder.usersOf(ns, "other")).toEqual(["SandboxRun/elsewhere"]);
      // The VM given back (status says so): no longer a user.
      await admin.patch(path(kindNames.sandboxRun.plural, ns, "holding", "status"), { status: { phase: "Succeeded", vmReleased: true } }, "merge", { discardResult: true });
      await poll(() => r.sharder.usersOf(ns, "default").length === 0, 30_000, "the run's VM given back to show in the sharder's cache");
      expect(letGo).toEqual([`SandboxRun ${ns}/default`]);
      // Deleted while holding: a user let go; a run that held nothing: none.
      await admin.delete(path(kindNames.sandboxRun.plural, ns, "elsewhere"));
      await admin.delete(path(kindNames.sandboxRun.plural, ns, "in-a-sandbox"));
      // A run created after them: once the sharder sees it, it has seen both deletions (one watch, in order).
      await admin.create(runs, run("after", { sandboxTemplate: { tier: "standard", connectionRef: { name: "third" } } }), { discardResult: true });
      await poll(() => r.sharder.usersOf(ns, "third").length === 1, 30_000, "the run created after the deletions in the sharder's cache");
      expect(letGo).toEqual([`SandboxRun ${ns}/default`, `SandboxRun ${ns}/other`]);
    } finally {
      await r.close();
    }
  });
});

describe("Sharder (real API server): on the replica's reference views", () => {
  const suite = adminAndNamespaces("sharder-shared");

  it("reads the kinds other kinds look up from the replica's caches instead of its own, and leaves them running when it stops", async () => {
    const admin = suite.admin();
    const ns = await suite.namespace();
    const all = await createAll(admin, ns, DEAD);
    // The replica's lookups' caches of every Skill, Agent and Sandbox (src/controllers/kind.ts informer()).
    const client = clientFor();
    const metrics = new Metrics({ defaultMetrics: false });
    const views = new Map<string, Informer<ShardedObject>>(
      [kindNames.skill, kindNames.agent, kindNames.sandbox].map((k) => [
        k.plural,
        new Informer<ShardedObject>(client, { path: resourcePath({ group: GROUP, version: VERSION, plural: k.plural }), namespaces: [ns], logger: testLogger(), metrics, view: REFERENCE_VIEW }),
      ]),
    );
    await Promise.all([...views.values()].map((i) => i.start()));
    const letGo: string[] = [];
    const r = recordingSharder(ns, undefined, undefined, undefined, {
      sharedInformer: (kind) => views.get(kind.plural),
      onLetGo: (kind, _ns, connection) => letGo.push(`${kind.kind}/${connection}`),
    });
    try {
      r.sharder.setMembers(LIVE);
      await r.sharder.start();
      await allPlacedOnLive(r.sharder, all.length, "every object moved to a live replica");
      // The same order as with its own caches: the running VMs first.
      expectRunningFirst(r.moves, all);
      // Its own caches are of the two kinds nobody looks up only.
      const own = (await r.metrics.registry.getSingleMetric("agentcompute_informer_objects")?.get())?.values.filter((v) => v.labels.view === "sharder").map((v) => v.labels.resource);
      expect(new Set(own?.map((resource) => String(resource).split("/").at(-1)))).toEqual(new Set([kindNames.agentDeployment.plural, kindNames.sandboxRun.plural]));
    } finally {
      await r.close();
    }
    try {
      // Stopped (leadership lost): the replica's caches go on (they see the deletion), without
      // the sharder's handlers (nobody is told of a user letting go).
      await admin.delete(path(kindNames.skill.plural, ns, "sk-0"));
      await poll(() => views.get(kindNames.skill.plural)!.get(ns, "sk-0") === undefined, 30_000, "the deletion seen by the replica's cache");
      expect(letGo).toEqual([]);
    } finally {
      await Promise.all([...views.values()].map((i) => i.stop()));
      await client.close();
    }
  });
});
