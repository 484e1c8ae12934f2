import { defineConfig } from "vitest/config";

// Two projects: `unit` needs nothing but Node; `e2e` runs against a real kube-apiserver
// (brought up once by the global setup) and the in-process service emulator.
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts"],
          testTimeout: 30_000,
        },
      },
      {
        test: {
          name: "e2e",
          include: ["test/e2e/**/*.test.ts"],
          globalSetup: ["test/e2e/global-setup.ts"],
          testTimeout: 120_000,
          hookTimeout: 600_000,
          // The machine has two cores and one API server: suites run one file at a time.
          fileParallelism: false,
        },
      },
    ],
  },
});
