package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the file paths of the credentials the server uses. Everything is generated
// once per data directory and reused on restart, so a kubeconfig (and every service
// account token) issued before a restart keeps working after it.
type pki struct {
	CACert, CAKey           string
	ServingCert, ServingKey string
	AdminCert, AdminKey     string
	SAKey, SAPub            string
}

func newPKI(dir string) pki {
	p := func(name string) string { return filepath.Join(dir, name) }
	return pki{
		CACert: p("ca.crt"), CAKey: p("ca.key"),
		ServingCert: p("apiserver.crt"), ServingKey: p("apiserver.key"),
		AdminCert: p("admin.crt"), AdminKey: p("admin.key"),
		SAKey: p("sa.key"), SAPub: p("sa.pub"),
	}
}

const certValidity = 10 * 365 * 24 * time.Hour

// ensure creates whatever is missing. A missing CA invalidates everything signed by it.
func (p pki) ensure() error {
	if err := os.MkdirAll(filepath.Dir(p.CACert), 0o700); err != nil {
		return err
	}
	caFresh := false
	if !exists(p.CACert) || !exists(p.CAKey) {
		key, err := newKey()
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			Subject:               pkix.Name{CommonName: "agent-operator-test-ca"},
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			BasicConstraintsValid: true,
			IsCA:                  true,
		}
		der, err := sign(tmpl, tmpl, key.Public(), key)
		if err != nil {
			return err
		}
		if err := writeKeyPair(p.CACert, p.CAKey, der, key); err != nil {
			return err
		}
		caFresh = true
	}
	caCert, caKey, err := loadKeyPair(p.CACert, p.CAKey)
	if err != nil {
		return fmt.Errorf("loading CA: %w", err)
	}

	if caFresh || !exists(p.ServingCert) || !exists(p.ServingKey) {
		key, err := newKey()
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver"},
			KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames: []string{
				"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local",
			},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback, net.ParseIP(serviceIP)},
		}
		der, err := sign(tmpl, caCert, key.Public(), caKey)
		if err != nil {
			return err
		}
		if err := writeKeyPair(p.ServingCert, p.ServingKey, der, key); err != nil {
			return err
		}
	}

	if caFresh || !exists(p.AdminCert) || !exists(p.AdminKey) {
		key, err := newKey()
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			// system:masters is bound to cluster-admin by the bootstrap RBAC policy and
			// short-circuits authorization: the credential works even if RBAC is broken.
			Subject:     pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
			KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		der, err := sign(tmpl, caCert, key.Public(), caKey)
		if err != nil {
			return err
		}
		if err := writeKeyPair(p.AdminCert, p.AdminKey, der, key); err != nil {
			return err
		}
	}

	if !exists(p.SAKey) || !exists(p.SAPub) {
		key, err := newKey()
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
		if err != nil {
			return err
		}
		if err := writePEM(p.SAKey, "EC PRIVATE KEY", keyDER, 0o600); err != nil {
			return err
		}
		if err := writePEM(p.SAPub, "PUBLIC KEY", pubDER, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(certValidity)
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
}

func writeKeyPair(certPath, keyPath string, certDER []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(keyPath, "EC PRIVATE KEY", keyDER, 0o600); err != nil {
		return err
	}
	return writePEM(certPath, "CERTIFICATE", certDER, 0o644)
}

func loadKeyPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return writeFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
