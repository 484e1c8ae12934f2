import { describe, expect, it } from "vitest";
import { UrgentMoves } from "../../../src/sharding/urgent.js";

/** Whether the promise settled within a turn of the event loop. */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(() => (done = true));
  await new Promise((r) => setImmediate(r));
  return done;
}

describe("UrgentMoves", () => {
  it("lets the urgent moves go at once and holds the others until the last urgent one is done", async () => {
    const moves = new UrgentMoves(60_000);
    moves.set(["sandboxes/ns/a", "sandboxes/ns/b"]);
    const a = moves.before("sandboxes/ns/a");
    expect(await settled(a)).toBe(true);
    const agent = moves.before("agents/ns/x");
    const idle = moves.before("sandboxes/ns/no-vm");
    expect(await settled(agent)).toBe(false);
    moves.done("sandboxes/ns/a", await a);
    expect(await settled(agent)).toBe(false);
    moves.done("sandboxes/ns/b", await moves.before("sandboxes/ns/b"));
    expect(await settled(agent)).toBe(true);
    expect(await settled(idle)).toBe(true);
    expect(await settled(moves.before("agents/ns/y"))).toBe(true);
  });

  it("holds nothing when no move is urgent, or once the urgent ones are called off", async () => {
    const moves = new UrgentMoves(60_000);
    expect(await settled(moves.before("agents/ns/x"))).toBe(true);
    moves.set(["sandboxes/ns/a"]);
    const agent = moves.before("agents/ns/x");
    moves.set([]); // a new membership: nothing of a dead replica left
    expect(await settled(agent)).toBe(true);
  });

  it("lets a held move go at once when a later set makes it urgent (a second replica died meanwhile)", async () => {
    const moves = new UrgentMoves(60_000);
    moves.set(["sandboxes/ns/of-first"]);
    const held = moves.before("sandboxes/ns/of-second");
    const agent = moves.before("agents/ns/x");
    expect(await settled(held)).toBe(false);
    moves.set(["sandboxes/ns/of-first", "sandboxes/ns/of-second"]);
    expect(await settled(held)).toBe(true);
    expect(await settled(agent)).toBe(false);
  });

  it("does not count a move looked at under an earlier set: it decided on the older membership", async () => {
    const moves = new UrgentMoves(60_000);
    moves.set(["sandboxes/ns/a"]);
    const before = await moves.before("sandboxes/ns/a");
    moves.set(["sandboxes/ns/a"]); // membership changed while the move was being made
    const agent = moves.before("agents/ns/x");
    moves.done("sandboxes/ns/a", before);
    expect(await settled(agent)).toBe(false);
    expect(moves.size).toBe(1);
    moves.done("sandboxes/ns/a", await moves.before("sandboxes/ns/a"));
    expect(await settled(agent)).toBe(true);
  });

  it("lets a move urgent by itself go at once (a running VM let go after the urgent set was made), also one already waiting", async () => {
    const moves = new UrgentMoves(60_000);
    moves.set(["sandboxes/ns/a"]);
    expect(await settled(moves.before("sandboxes/ns/released", () => true))).toBe(true);
    let letGo = false;
    const waiting = moves.before("sandboxes/ns/draining", () => letGo);
    const agent = moves.before("agents/ns/x");
    expect(await settled(waiting)).toBe(false);
    letGo = true; // its owner acknowledged the drain
    moves.wake();
    expect(await settled(waiting)).toBe(true);
    expect(await settled(agent)).toBe(false);
  });

  it("lets every other move go at one deadline when an urgent move is never done", async () => {
    const moves = new UrgentMoves(60);
    moves.set(["sandboxes/ns/stuck"]);
    const first = moves.before("agents/ns/x");
    await new Promise((r) => setTimeout(r, 30));
    const later = moves.before("skills/ns/y"); // came while the others waited
    expect(await settled(later)).toBe(false);
    await first; // the test would time out otherwise
    // Released with the first, not a full wait after its own start.
    expect(await settled(later)).toBe(true);
    expect(moves.size).toBe(0);
    expect(await settled(moves.before("agents/ns/z"))).toBe(true);
  });
});
