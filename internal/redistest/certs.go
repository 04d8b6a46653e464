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
	serverDER, serverKeyDER, err := newServerCertificate(notBefore, caCert, caKey)
	if err != nil {
		return certFiles{}, err
	}
	files := certFiles{
		caFile:   filepath.Join(dir, "ca.crt"),
		certFile: filepath.Join(dir, "server.crt"),
		keyFile:  filepath.Join(dir, "server.key"),
		pool:     x509.NewCertPool(),
	}
	files.pool.AddCert(caCert)
	if err := writePEM(files.caFile, "CERTIFICATE", caCert.Raw); err != nil {
		return certFiles{}, err
	}
	if err := writePEM(files.certFile, "CERTIFICATE", serverDER); err != nil {
		return certFiles{}, err
	}
	if err := writePEM(files.keyFile, "PRIVATE KEY", serverKeyDER); err != nil {
		return certFiles{}, err
	}
	return files, nil
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

// newServerCertificate returns the DER of a certificate for 127.0.0.1 (and
// localhost) signed by the CA, and of its PKCS #8 private key.
func newServerCertificate(notBefore time.Time, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certDER, keyDER []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("server key: %w", err)
	}
	template := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
		NotBefore:   notBefore,
		NotAfter:    notBefore.Add(certValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
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
