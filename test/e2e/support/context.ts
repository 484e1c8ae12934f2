// Values the e2e global setup hands to test files through vitest's provide/inject.
// Kept in its own module so the global setup (main process) can import the types
// without pulling in the test-side helpers.
declare module "vitest" {
  export interface ProvidedContext {
    /**
     * Kubeconfig of the API server the e2e tests run against: a file path, or (with
     * USE_EXISTING_CLUSTER=true) the caller's KUBECONFIG value, which may list several
     * files separated by ':'. The empty string means kubectl's default (~/.kube/config).
     */
    kubeconfig: string;
    /** true when USE_EXISTING_CLUSTER=true: nothing was started, the caller's cluster is used. */
    useExistingCluster: boolean;
  }
}

export {};
