// The sharder on a real API server: when a replica is gone, its Sandboxes with a running VM
// (status.vmId) are moved before anything else of its share, of any kind, and a new leader's
// sharder does not wait for the other kinds' caches to move them. Their renewals stop until
// they move; the rest loses nothing by waiting (src/sharding/urgent.ts). What is asserted is
// the order of the moves' PATCHes as the API server answered them.
import { beforeAll, describe, expect, it } from "vitest";
import { GROUP, VERSION, kindNames } from "../../../src/api/names.js";
import { resourcePath, type KubeClient, type KubeObject } from "../../../src/runtime/kube-client.js";
import { Metrics } from "../../../src/runtime/metrics.js";
import { SHARDED_CONTROLLERS } from "../../../src/sharding/index.js";
import { releasePatch } from "../../../src/sharding/assignment.js";
import { OWNER_LABEL } from "../../../src/sharding/labels.js";
import { Ring, objectKey } from "../../../src/sharding/ring.js";
import { Sharder } from "../../../src/sharding/sharder.js";
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

type Move = { at: "sent" | "answered"; object: string };

/** PATCHes of the objects `of` picks wait until `until` resolves; `held` counts them. */
interface HeldPatches {
  of: (object: string) => boolean;
  until: Promise<void>;
  held: number;
}

/**
 * A Sharder over `namespace` whose PATCHes are recorded as they are sent and as they are
 * answered. With `holdLists`, the LISTs of every kind but the Sandboxes are answered only once
 * it resolves.
 */
function recordingSharder(namespace: string, holdLists?: Promise<void>, holdPatches?: HeldPatches): { sharder: Sharder; moves: Move[]; close(): Promise<void> } {
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
    if (holdPatches?.of(object)) {
      holdPatches.held++;
      await holdPatches.until;
    }
    moves.push({ at: "sent", object });
    await patch(p, body, type, opts);
    moves.push({ at: "answered", object });
  }) as KubeClient["patch"];
  const sharder = new Sharder({ client, logger: testLogger(), metrics: new Metrics({ defaultMetrics: false }), namespaces: [namespace], kinds: [...SHARDED_CONTROLLERS.values()] });
  return {
    sharder,
    moves,
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

  it("places a Sandbox its owner let go of with a running VM (a drain acknowledged) ahead of a backlog of placements", async () => {
    const ns = await namespace();
    // First in the list, and owned by the replica the ring picks: nothing to do for it at the start.
    const released = "a-released";
    const owner = new Ring(LIVE).owner(objectKey(kindNames.sandbox.plural, ns, released));
    const sandboxes = path(kindNames.sandbox.plural, ns);
    const sandbox = (name: string, labels?: Record<string, string>) => ({ apiVersion: `${GROUP}/${VERSION}`, kind: "Sandbox", metadata: { name, labels }, spec: { tier: "standard" } });
    await admin.create(sandboxes, sandbox(released, { [OWNER_LABEL]: owner! }), { discardResult: true });
    await admin.patch(path(kindNames.sandbox.plural, ns, released, "status"), { status: { vmId: "vm-released", state: "running" } }, "merge", { discardResult: true });
    // New Sandboxes to place: more than the sharder's workers, whose PATCHes are held.
    const backlog = 40;
    for (let i = 0; i < backlog; i++) await admin.create(sandboxes, sandbox(`sbx-backlog-${i}`), { discardResult: true });
    let unhold: () => void = () => undefined;
    const held: HeldPatches = { of: (o) => o.includes("/sbx-backlog-"), until: new Promise<void>((resolve) => (unhold = resolve)), held: 0 };
    const r = recordingSharder(ns, undefined, held);
    try {
      r.sharder.setMembers(LIVE);
      await r.sharder.start();
      await poll(() => held.held === 16, 30_000, "every worker on a held placement");
      // The owner lets it go (as after a drain), its VM running: nobody renews it until it is placed.
      await admin.patch(`${sandboxes}/${released}`, releasePatch(undefined), "merge", { discardResult: true });
      await poll(() => (r.sharder.shares().get(owner!) ?? 0) === 0, 30_000, "the release seen by the sharder");
      unhold();
      await poll(() => r.moves.filter((m) => m.at === "answered").length === backlog + 1, 60_000, "every placement answered");
    } finally {
      unhold();
      await r.close();
    }
    const sent = r.moves.filter((m) => m.at === "sent").map((m) => m.object);
    // Only the placements the workers held were sent before it, not the other 24 queued before it.
    expect(sent.indexOf(`${kindNames.sandbox.plural}/${released}`), JSON.stringify(sent)).toBeLessThanOrEqual(16);
  });
});
