import { describe, expect, it } from "vitest";
import { ExpiryHeap } from "../../../src/emulator/expiry-heap.js";

describe("ExpiryHeap", () => {
  it("pops exactly the entries due, earliest first, like a sorted list would", () => {
    // A small deterministic PRNG: the same sequence on every run.
    let seed = 42;
    const rand = (): number => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
    const heap = new ExpiryHeap();
    let model: { at: number; id: string }[] = [];
    let now = 0;
    for (let step = 0; step < 2000; step++) {
      if (rand() < 0.6) {
        const entry = { at: now + Math.floor(rand() * 1000), id: `vm-${step}` };
        heap.push(entry.at, entry.id);
        model.push(entry);
      } else {
        now += Math.floor(rand() * 200);
        const due = heap.popDue(now);
        const expected = model.filter((e) => e.at <= now).sort((a, b) => a.at - b.at);
        model = model.filter((e) => e.at > now);
        expect(due.map((e) => e.at)).toEqual(expected.map((e) => e.at));
        expect(new Set(due.map((e) => e.id))).toEqual(new Set(expected.map((e) => e.id)));
        expect(heap.size).toBe(model.length);
      }
    }
  });
});
