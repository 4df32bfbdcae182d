package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
)

// errUnexpectedAddress is the dialer refusing an address it was not told
// to dial: the Control hook is the connect-time check.
var errUnexpectedAddress = errors.New("egress: dial to an address that was not checked")

// resolve returns the addresses of host, IPv4-mapped addresses unmapped. An
// IP literal is its own answer: no lookup.
func (s *Service) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	addrs, err := s.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if a = a.Unmap(); a.IsValid() {
			out = append(out, a)
		}
	}
	return out, nil
}

// dialChecked connects to addr, the address the policy decided on, and to
// nothing else: the dialer's Control hook compares the socket's address
// with it right before connect(2), so no resolver, proxy setting or
// library change can send the connection elsewhere. Unspecified,
// multicast and broadcast addresses are refused whatever the policy says.
func (s *Service) dialChecked(ctx context.Context, addr netip.Addr, port int) (net.Conn, error) {
	if addr.IsUnspecified() || addr.IsMulticast() || addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return nil, fmt.Errorf("%w: %s", errUnexpectedAddress, addr)
	}
	want := netip.AddrPortFrom(addr, uint16(port))
	d := net.Dialer{
		Timeout: DefaultDialTimeout,
		Control: func(_, address string, _ syscall.RawConn) error {
			got, err := netip.ParseAddrPort(address)
			if err != nil || got.Addr().Unmap() != want.Addr() || got.Port() != want.Port() {
				return fmt.Errorf("%w: %s", errUnexpectedAddress, address)
			}
			return nil
		},
	}
	return d.DialContext(ctx, "tcp", net.JoinHostPort(addr.String(), strconv.Itoa(port)))
}

// interfaceAddrs are the gateway host's own addresses.
func interfaceAddrs() []netip.Addr {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range ifaddrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}

func addrStrings(as []netip.Addr) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}

// StaticResolver answers the names in hosts from the map (lower case, no
// trailing dot) and asks next for every other name: an administrator's
// pinned addresses, and the way tests map their host names to loopback
// services.
func StaticResolver(hosts map[string][]netip.Addr, next Resolver) Resolver {
	return staticResolver{hosts: hosts, next: next}
}

type staticResolver struct {
	hosts map[string][]netip.Addr
	next  Resolver
}

func (r staticResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if as, ok := r.hosts[strings.TrimSuffix(strings.ToLower(host), ".")]; ok {
		return as, nil
	}
	return r.next.LookupNetIP(ctx, network, host)
}
