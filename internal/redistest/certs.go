package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certFiles are the PEM files a TLS server is configured with, and the pool
// its clients trust.
type certFiles struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool

	// The CA, to sign a Sentinel's certificate with.
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// certValidity is how long the test certificates hold. A test outlives
// neither, and the hour before now absorbs clocks that disagree a little.
const certValidity = 24 * time.Hour

// writeCertificates makes a CA for this one server and a certificate for
// 127.0.0.1 signed by it, and writes both into dir. A CA of its own, rather
// than a self-signed server certificate, is what a real deployment looks
// like to the client: it trusts the issuer, not the server's own key.
func writeCertificates(dir string) (certFiles, error) {
	notBefore := time.Now().Add(-time.Hour)
	caCert, caKey, err := newCA(notBefore)
	if err != nil {
		return certFiles{}, err
	}
	files := certFiles{caFile: filepath.Join(dir, "ca.crt"), pool: x509.NewCertPool(), ca: caCert, caKey: caKey}
	files.pool.AddCert(caCert)
	if err := writePEM(files.caFile, "CERTIFICATE", caCert.Raw); err != nil {
		return certFiles{}, err
	}
	return files.writeServer(dir, notBefore, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	})
}

// writeSentinelCertificates makes a certificate for the name localhost
// alone, signed by the CA of issuer (the watched server's), and writes it
// into dir: a client that checks the servers the Sentinel names against
// the Sentinel's name fails.
func writeSentinelCertificates(dir string, issuer certFiles) (certFiles, error) {
	files := certFiles{caFile: issuer.caFile, pool: issuer.pool, ca: issuer.ca, caKey: issuer.caKey}
	return files.writeServer(dir, time.Now().Add(-time.Hour), &x509.Certificate{
		Subject:  pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"},
	})
}

// writeServer signs a server certificate of template's names with the CA
// of f, and writes it and its key into dir.
func (f certFiles) writeServer(dir string, notBefore time.Time, template *x509.Certificate) (certFiles, error) {
	serverDER, serverKeyDER, err := newServerCertificate(notBefore, template, f.ca, f.caKey)
	if err != nil {
		return certFiles{}, err
	}
	f.certFile, f.keyFile = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := writePEM(f.certFile, "CERTIFICATE", serverDER); err != nil {
		return certFiles{}, err
	}
	if err := writePEM(f.keyFile, "PRIVATE KEY", serverKeyDER); err != nil {
		return certFiles{}, err
	}
	return f, nil
}

func newCA(notBefore time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	template := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(certValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	return cert, key, nil
}

// newServerCertificate returns the DER of a certificate for the names of
// template signed by the CA, and of its PKCS #8 private key.
func newServerCertificate(notBefore time.Time, template *x509.Certificate, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certDER, keyDER []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("server key: %w", err)
	}
	template.NotBefore = notBefore
	template.NotAfter = notBefore.Add(certValidity)
	template.KeyUsage = x509.KeyUsageDigitalSignature
	template.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	certDER, err = x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("server certificate: %w", err)
	}
	keyDER, err = x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("server key: %w", err)
	}
	return certDER, keyDER, nil
}

func writePEM(path, blockType string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
	return os.WriteFile(path, data, 0o600)
}
