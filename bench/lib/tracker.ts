// Watches a scenario's resources from the benchmark process (its own informers, not the
// operator's) and records when each one first became Ready: Ready=True computed for the
// current generation. The cached copy of each object is reduced to what that needs.
import { GROUP, VERSION } from "../../src/api/index.js";
import { Informer } from "../../src/runtime/informer.js";
import type { KubeClient, KubeObject } from "../../src/runtime/kube-client.js";
import { resourcePath } from "../../src/runtime/kube-client.js";
import { createLogger } from "../../src/runtime/logging.js";
import type { Plural } from "./cluster.js";

interface Slim extends KubeObject {
  metadata: { name: string; namespace: string; resourceVersion?: string; uid?: string };
  ready: boolean;
  reason: string | undefined;
}

interface Wire {
  metadata: { name: string; namespace: string; resourceVersion?: string; uid?: string; generation?: number };
  status?: { observedGeneration?: number; conditions?: Array<{ type: string; status: string; reason?: string; observedGeneration?: number }> };
}

function slim(o: Wire): Slim {
  const ready = o.status?.conditions?.find((c) => c.type === "Ready");
  const current = o.status?.observedGeneration === o.metadata.generation;
  return {
    metadata: { name: o.metadata.name, namespace: o.metadata.namespace, resourceVersion: o.metadata.resourceVersion, uid: o.metadata.uid },
    ready: current && ready?.status === "True",
    reason: ready?.reason,
  };
}

export class ReadyTracker {
  private readonly informers: Informer<Slim>[] = [];
  /** key (plural/name) -> ms (performance.now()) when first seen Ready. */
  private readonly readyAt = new Map<string, number>();
  private readonly seen = new Set<string>();
  private readonly waiters = new Map<string, Array<(at: number) => void>>();

  constructor(
    kube: KubeClient,
    namespace: string,
    readonly plurals: readonly Plural[],
  ) {
    const logger = createLogger({ level: "warn" });
    for (const plural of plurals) {
      const informer = new Informer<Slim>(kube, {
        path: resourcePath({ group: GROUP, version: VERSION, plural, namespace }),
        logger,
        view: { name: "ready", transform: (o) => slim(o as unknown as Wire) },
      });
      const onObject = (o: Slim): void => {
        const key = `${plural}/${o.metadata.name}`;
        this.seen.add(key);
        if (!o.ready || this.readyAt.has(key)) return;
        const at = performance.now();
        this.readyAt.set(key, at);
        const ws = this.waiters.get(key);
        if (ws) {
          this.waiters.delete(key);
          for (const w of ws) w(at);
        }
      };
      informer.on("add", onObject);
      informer.on("update", (o) => onObject(o));
      informer.on("delete", (o) => {
        const key = `${plural}/${o.metadata.name}`;
        this.seen.delete(key);
        this.readyAt.delete(key);
      });
      this.informers.push(informer);
    }
  }

  async start(): Promise<void> {
    await Promise.all(this.informers.map((i) => i.start()));
  }

  async stop(): Promise<void> {
    await Promise.all(this.informers.map((i) => i.stop()));
  }

  /** Resources seen (Ready or not). */
  get total(): number {
    return this.seen.size;
  }

  get ready(): number {
    return this.readyAt.size;
  }

  readyOf(plural: Plural): number {
    let n = 0;
    for (const k of this.readyAt.keys()) if (k.startsWith(`${plural}/`)) n++;
    return n;
  }

  /** Ready times (performance.now() ms) of every resource, per kind. */
  times(): Map<Plural, number[]> {
    const out = new Map<Plural, number[]>();
    for (const [k, at] of this.readyAt) {
      const plural = k.slice(0, k.indexOf("/")) as Plural;
      let list = out.get(plural);
      if (!list) out.set(plural, (list = []));
      list.push(at);
    }
    return out;
  }

  /** Resolves with the performance.now() at which plural/name was first seen Ready. */
  whenReady(plural: Plural, name: string): Promise<number> {
    const key = `${plural}/${name}`;
    const at = this.readyAt.get(key);
    if (at !== undefined) return Promise.resolve(at);
    return new Promise((resolve) => {
      let ws = this.waiters.get(key);
      if (!ws) this.waiters.set(key, (ws = []));
      ws.push(resolve);
    });
  }

  /** Reasons of the Ready condition of resources that are not Ready, with counts (for a stuck run). */
  notReadyReasons(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [i, informer] of this.informers.entries()) {
      for (const o of informer.list()) {
        if (this.readyAt.has(`${this.plurals[i]}/${o.metadata.name}`)) continue;
        const r = `${this.plurals[i]}:${o.reason ?? "none"}`;
        out[r] = (out[r] ?? 0) + 1;
      }
    }
    return out;
  }
}
