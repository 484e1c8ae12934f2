// Command kube-apiserver runs a real Kubernetes control plane for tests and local runs:
// an embedded etcd, the upstream kube-apiserver (built from k8s.io/kubernetes through its
// normal options path, the same code as the release binary) and, optionally, an
// in-process kube-controller-manager with only the garbage-collector and namespace
// controllers. Everything listens on 127.0.0.1 only.
//
// All state (etcd data, certificates, service-account signing key, chosen ports) lives
// under --data-dir, so stopping and starting again on the same directory keeps both the
// stored objects and the credentials: a kubeconfig written before a restart stays valid.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/embed"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	utilversion "k8s.io/component-base/version"
	"k8s.io/klog/v2"

	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
)

const (
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1" // first address of serviceCIDR: the "kubernetes" Service
	saIssuer    = "https://kubernetes.default.svc.cluster.local"
	contextName = "agent-operator-test"
)

type config struct {
	dataDir            string
	kubeconfigOut      string
	port               int
	minRequestTimeout  int
	compactionInterval time.Duration
	controllers        bool
	etcdNoFsync        bool
	verbosity          int
	extraArgs          multiFlag
	readyTimeout       time.Duration
	shutdownTimeout    time.Duration
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var cfg config
	flag.StringVar(&cfg.dataDir, "data-dir", "", "directory for etcd data, certificates and state (required; reused on restart)")
	flag.StringVar(&cfg.kubeconfigOut, "kubeconfig-out", "", "where to write the admin kubeconfig once the server is ready (default <data-dir>/kubeconfig)")
	flag.IntVar(&cfg.port, "port", 0, "secure port on 127.0.0.1 (0: reuse the port recorded in --data-dir if it is free, else any free port)")
	flag.IntVar(&cfg.minRequestTimeout, "min-request-timeout", 1800, "kube-apiserver --min-request-timeout: watches last between this and twice this many seconds")
	flag.DurationVar(&cfg.compactionInterval, "etcd-compaction-interval", 5*time.Minute, "kube-apiserver --etcd-compaction-interval: how often old revisions are compacted (0 disables)")
	flag.BoolVar(&cfg.controllers, "controllers", true, "also run kube-controller-manager in-process with the garbage-collector and namespace controllers")
	flag.BoolVar(&cfg.etcdNoFsync, "etcd-unsafe-no-fsync", true, "run etcd without fsync (faster; data survives a clean stop, not a machine crash)")
	flag.IntVar(&cfg.verbosity, "v", 0, "klog verbosity for the apiserver and controllers")
	flag.Var(&cfg.extraArgs, "apiserver-arg", "extra kube-apiserver flag, e.g. --apiserver-arg=--audit-log-path=/tmp/audit.log (repeatable)")
	flag.DurationVar(&cfg.readyTimeout, "ready-timeout", 3*time.Minute, "give up if the apiserver is not ready within this time")
	flag.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM/SIGINT, wait at most this long for a graceful stop")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments: %v", flag.Args()))
	}
	if cfg.dataDir == "" {
		fail(errors.New("--data-dir is required"))
	}
	abs, err := filepath.Abs(cfg.dataDir)
	if err != nil {
		fail(err)
	}
	cfg.dataDir = abs
	if cfg.kubeconfigOut == "" {
		cfg.kubeconfigOut = filepath.Join(cfg.dataDir, "kubeconfig")
	}
	if err := run(cfg); err != nil {
		fail(err)
	}
}

func fail(err error) {
	klog.Flush()
	fmt.Fprintf(os.Stderr, "kube-apiserver (test control plane): %v\n", err)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s [control-plane] %s\n", time.Now().Format(time.RFC3339), fmt.Sprintf(format, args...))
}

// ports are kept in the data directory so that a restart comes back on the same address
// and clients holding the old kubeconfig reconnect.
type ports struct {
	APIServer  int `json:"apiserver"`
	EtcdClient int `json:"etcdClient"`
	EtcdPeer   int `json:"etcdPeer"`
}

func run(cfg config) error {
	if err := os.MkdirAll(cfg.dataDir, 0o700); err != nil {
		return err
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	_ = klogFlags.Set("v", strconv.Itoa(cfg.verbosity))

	certs := newPKI(filepath.Join(cfg.dataDir, "pki"))
	if err := certs.ensure(); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}

	// A kubeconfig left from an earlier run would look like a ready server.
	_ = os.Remove(cfg.kubeconfigOut)

	var saved ports
	statePath := filepath.Join(cfg.dataDir, "ports.json")
	if b, err := os.ReadFile(statePath); err == nil {
		_ = json.Unmarshal(b, &saved)
	}
	wantAPI := cfg.port
	if wantAPI == 0 {
		wantAPI = saved.APIServer
	}
	apiListener, err := listen(wantAPI)
	if err != nil {
		if cfg.port != 0 {
			return fmt.Errorf("port %d: %w", cfg.port, err)
		}
		logf("recorded port %d is taken, picking a free one", wantAPI)
		if apiListener, err = listen(0); err != nil {
			return err
		}
	}
	apiPort := apiListener.Addr().(*net.TCPAddr).Port
	etcdClientPort, err := reservePort(saved.EtcdClient, apiPort)
	if err != nil {
		return err
	}
	etcdPeerPort, err := reservePort(saved.EtcdPeer, apiPort, etcdClientPort)
	if err != nil {
		return err
	}
	state, _ := json.Marshal(ports{APIServer: apiPort, EtcdClient: etcdClientPort, EtcdPeer: etcdPeerPort})
	if err := writeFileAtomic(statePath, state, 0o644); err != nil {
		return err
	}

	ctx := genericapiserver.SetupSignalContext() // first SIGTERM/SIGINT: graceful; second: exit(1)

	// --- etcd ---------------------------------------------------------------------
	logf("starting etcd on 127.0.0.1:%d (data %s)", etcdClientPort, filepath.Join(cfg.dataDir, "etcd"))
	etcd, err := startEtcd(filepath.Join(cfg.dataDir, "etcd"), etcdClientPort, etcdPeerPort, cfg.etcdNoFsync)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	var etcdOnce sync.Once
	closeEtcd := func() { etcdOnce.Do(etcd.Close) }
	defer closeEtcd()

	// --- kube-apiserver -------------------------------------------------------------
	args := []string{
		"--etcd-servers=" + fmt.Sprintf("http://127.0.0.1:%d", etcdClientPort),
		"--etcd-compaction-interval=" + cfg.compactionInterval.String(),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// The "kubernetes" Service gets no endpoints: Endpoints may not point at loopback.
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--allow-privileged=true",
		"--authorization-mode=Node,RBAC",
		// As envtest does: without the serviceaccount controller there is no "default"
		// ServiceAccount, and this plugin would reject every Pod.
		"--disable-admission-plugins=ServiceAccount",
		"--tls-cert-file=" + certs.ServingCert,
		"--tls-private-key-file=" + certs.ServingKey,
		"--client-ca-file=" + certs.CACert,
		"--service-account-issuer=" + saIssuer,
		"--api-audiences=" + saIssuer,
		"--service-account-key-file=" + certs.SAPub,
		"--service-account-signing-key-file=" + certs.SAKey,
		"--min-request-timeout=" + strconv.Itoa(cfg.minRequestTimeout),
		"--profiling=false",
		"--v=" + strconv.Itoa(cfg.verbosity),
	}
	args = append(args, cfg.extraArgs...)

	apiDone := make(chan error, 1)
	if err := startAPIServer(ctx, args, apiListener, apiPort, apiDone); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	logf("kube-apiserver starting on https://127.0.0.1:%d", apiPort)

	if err := waitReady(ctx, certs, apiPort, cfg.readyTimeout, apiDone); err != nil {
		closeEtcd()
		return err
	}

	if err := writeKubeconfig(cfg.kubeconfigOut, certs, apiPort); err != nil {
		return err
	}
	// An in-process controller manager talks to the apiserver through a kubeconfig of its own.
	internalKubeconfig := filepath.Join(cfg.dataDir, "admin.kubeconfig")
	if err := writeKubeconfig(internalKubeconfig, certs, apiPort); err != nil {
		return err
	}

	kcmDone := make(chan error, 1)
	if cfg.controllers {
		if err := startControllerManager(ctx, internalKubeconfig, cfg.verbosity, kcmDone); err != nil {
			return fmt.Errorf("kube-controller-manager: %w", err)
		}
		logf("kube-controller-manager running (garbage-collector, namespace)")
	}
	logf("ready: https://127.0.0.1:%d, kubeconfig %s", apiPort, cfg.kubeconfigOut)

	select {
	case <-ctx.Done():
		logf("signal received, shutting down")
	case err := <-apiDone:
		closeEtcd()
		return fmt.Errorf("kube-apiserver stopped unexpectedly: %v", err)
	case err := <-kcmDone:
		closeEtcd()
		return fmt.Errorf("kube-controller-manager stopped unexpectedly: %v", err)
	}

	timer := time.NewTimer(cfg.shutdownTimeout)
	defer timer.Stop()
	select {
	case err := <-apiDone:
		if err != nil {
			logf("kube-apiserver exited: %v", err)
		}
	case <-timer.C:
		logf("kube-apiserver did not stop within %s, closing etcd anyway", cfg.shutdownTimeout)
	}
	closeEtcd()
	klog.Flush()
	logf("stopped")
	return nil
}

func listen(port int) (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}

// reservePort returns want if it is free, else any free port other than avoid.
func reservePort(want int, avoid ...int) (int, error) {
	if want != 0 {
		if l, err := listen(want); err == nil {
			_ = l.Close()
			return want, nil
		}
	}
	for range 20 {
		l, err := listen(0)
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		clash := false
		for _, a := range avoid {
			clash = clash || a == p
		}
		if !clash {
			return p, nil
		}
	}
	return 0, errors.New("no free port")
}

func startEtcd(dir string, clientPort, peerPort int, noFsync bool) (*embed.Etcd, error) {
	c := embed.NewConfig()
	c.Name = "test-control-plane"
	c.Dir = dir
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	c.ListenClientUrls = []url.URL{clientURL}
	c.AdvertiseClientUrls = []url.URL{clientURL}
	c.ListenPeerUrls = []url.URL{peerURL}
	c.AdvertisePeerUrls = []url.URL{peerURL}
	c.InitialCluster = c.InitialClusterFromName(c.Name)
	c.LogLevel = "error"
	c.UnsafeNoFsync = noFsync
	c.EnableGRPCGateway = false
	e, err := embed.StartEtcd(c)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, errors.New("etcd not ready after 60s")
	}
}

// startAPIServer goes through the same options path as the kube-apiserver command:
// NewServerRunOptions, flag parsing, Complete, Validate, Run.
func startAPIServer(ctx context.Context, args []string, ln net.Listener, port int, done chan<- error) error {
	_, featureGate := featuregate.DefaultComponentGlobalsRegistry.ComponentGlobalsOrRegister(
		featuregate.DefaultKubeComponent, utilversion.DefaultBuildEffectiveVersion(), utilfeature.DefaultMutableFeatureGate)
	s := apiserveroptions.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	s.SecureServing.Listener = ln
	s.SecureServing.BindPort = port
	if err := featuregate.DefaultComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
		return err
	}
	// kube-apiserver's own loopback clients should not log self-issued warnings.
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	completed, err := s.Complete(ctx)
	if err != nil {
		return err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return utilerrors.NewAggregate(errs)
	}
	featureGate.AddMetrics()
	go func() { done <- apiserverapp.Run(ctx, completed) }()
	return nil
}

func startControllerManager(ctx context.Context, kubeconfig string, verbosity int, done chan<- error) error {
	s, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return err
	}
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, f := range s.Flags(kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases()).FlagSets {
		fs.AddFlagSet(f)
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=garbagecollector,namespace",
		"--leader-elect=false",
		"--secure-port=0", // no serving endpoint: nothing needs its /healthz or /metrics
		"--v=" + strconv.Itoa(verbosity),
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := s.Config(kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases())
	if err != nil {
		return err
	}
	go func() { done <- kcmapp.Run(ctx, c.Complete()) }()
	return nil
}

func waitReady(ctx context.Context, certs pki, port int, timeout time.Duration, apiDone <-chan error) error {
	client, err := adminHTTPClient(certs)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	readyz := fmt.Sprintf("https://127.0.0.1:%d/readyz", port)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case err := <-apiDone:
			return fmt.Errorf("kube-apiserver exited before it was ready: %v", err)
		case <-ctx.Done():
			return errors.New("interrupted while waiting for the apiserver")
		case <-time.After(250 * time.Millisecond):
		}
		resp, err := client.Get(readyz)
		if err != nil {
			last = err.Error()
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		last = resp.Status
	}
	return fmt.Errorf("kube-apiserver not ready after %s (last: %s)", timeout, last)
}

func adminHTTPClient(certs pki) (*http.Client, error) {
	pair, err := tls.LoadX509KeyPair(certs.AdminCert, certs.AdminKey)
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(certs.CACert)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}},
	}, nil
}

func writeKubeconfig(path string, certs pki, port int) error {
	ca, err := os.ReadFile(certs.CACert)
	if err != nil {
		return err
	}
	crt, err := os.ReadFile(certs.AdminCert)
	if err != nil {
		return err
	}
	key, err := os.ReadFile(certs.AdminKey)
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[contextName] = &clientcmdapi.Cluster{
		Server:                   fmt.Sprintf("https://127.0.0.1:%d", port),
		CertificateAuthorityData: ca,
	}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	kc.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = contextName
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o600)
}
