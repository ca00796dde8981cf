package telemetry

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// checkOTLPEnv checks the OTLP exporter's variables of signal ("TRACES",
// "METRICS") that decide where its data goes and whom it trusts: the endpoints,
// the certificate files and the headers, each in its general and its signal's
// form. The exporter reads them itself, and skips one it cannot use without a
// word: a mistyped endpoint would send to localhost, a CA file that is not there
// would leave the system's roots trusted in its stead, a header that does not
// parse would leave its credentials out. Header values, which carry credentials,
// are never repeated in an error.
func checkOTLPEnv(getenv func(string) string, signal, protocol string) error {
	var errs []error
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_" + signal + "_ENDPOINT"} {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			errs = append(errs, checkEndpoint(name, v, protocol))
		}
	}
	for _, prefix := range []string{"OTEL_EXPORTER_OTLP_", "OTEL_EXPORTER_OTLP_" + signal + "_"} {
		if v := strings.TrimSpace(getenv(prefix + "CERTIFICATE")); v != "" {
			errs = append(errs, checkCA(prefix+"CERTIFICATE", v))
		}
		certName, keyName := prefix+"CLIENT_CERTIFICATE", prefix+"CLIENT_KEY"
		cert, key := strings.TrimSpace(getenv(certName)), strings.TrimSpace(getenv(keyName))
		switch {
		case cert != "" && key == "":
			errs = append(errs, fmt.Errorf("%s is set without %s; set both, or neither", certName, keyName))
		case cert == "" && key != "":
			errs = append(errs, fmt.Errorf("%s is set without %s; set both, or neither", keyName, certName))
		case cert != "":
			if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q and %s=%q are not a certificate and its key: %w", certName, cert, keyName, key, err))
			}
		}
		if v := getenv(prefix + "HEADERS"); strings.TrimSpace(v) != "" {
			errs = append(errs, checkHeaders(prefix+"HEADERS", v))
		}
	}
	return errors.Join(errs...)
}

// checkEndpoint checks an endpoint variable's value v: a URL with the scheme http
// (plain text) or https (TLS) and a host, as the specification has it, or, over
// gRPC, a unix socket's (unix:///path).
func checkEndpoint(name, v, protocol string) error {
	u, err := url.Parse(v)
	if err == nil {
		switch u.Scheme {
		case "http", "https":
			if u.Host != "" {
				return nil
			}
		case "unix":
			if protocol == "grpc" && u.Path != "" {
				return nil
			}
		}
		if u.User != nil {
			v = u.Redacted()
		}
	}
	port := "4318"
	if protocol == "grpc" {
		port = "4317"
	}
	return fmt.Errorf("%s=%q is not an http:// or https:// URL with a host; write the receiver's address with its scheme, as http://localhost:%s (https:// for TLS)", name, v, port)
}

// checkCA checks that file holds PEM certificates, as the exporter reads it.
func checkCA(name, file string) error {
	pem, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%s=%q: %w; point it at the PEM file of the CA that signed the receiver's certificate", name, file, err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s=%q holds no PEM certificate; point it at the PEM file of the CA that signed the receiver's certificate", name, file)
	}
	return nil
}

// checkHeaders checks a headers variable's value as the exporter reads it:
// comma-separated key=value entries, each value percent-encoded. An entry is named
// by its position and key, never its value.
func checkHeaders(name, v string) error {
	for i, entry := range strings.Split(v, ",") {
		key, value, ok := strings.Cut(entry, "=")
		key = strings.TrimSpace(key)
		switch {
		case !ok:
			return fmt.Errorf("%s: entry %d is not key=value; separate entries with commas and write a comma in a value as %%2C", name, i+1)
		case !httpguts.ValidHeaderFieldName(key):
			return fmt.Errorf("%s: entry %d has %q for a key, which is not a header name", name, i+1, key)
		}
		if _, err := url.PathUnescape(value); err != nil {
			return fmt.Errorf("%s: the value of %s (entry %d) is not percent-encoded: write %% as %%25", name, key, i+1)
		}
	}
	return nil
}
