// Command device-plugin-client is a kubelet-side device plugin client on grpc-go, not on
// devinject's HTTP/2 stack. From grpc-go 1.52, as in kubelets from 1.26, a `unix://` target
// sends `localhost` as the HTTP/2 :authority instead of the socket path.
//
// Usage: device-plugin-client SOCKET
//
// It prints one JSON line: the grpc-go version it was built with, the devices of the first
// ListAndWatch answer, the env of an Allocate for the first of them, and every :authority it
// wrote on the socket, decoded from its own frames (so the line says what went on the wire, not
// what the client was configured with). It exits non-zero with the error otherwise.
//
// The messages are described at run time (dynamicpb) from a FileDescriptorSet of the device
// plugin's proto, embedded at build time: scripts/grpc-go-client.sh makes it with protoc and
// builds this file in GOPATH mode against Debian's grpc-go.
package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The FileDescriptorSet of bins/device-plugin/src/api/deviceplugin_v1beta1.proto (protoc --descriptor_set_out).
//
//go:embed deviceplugin_v1beta1.pb
var descriptorSet []byte

const (
	listAndWatch = "/v1beta1.DevicePlugin/ListAndWatch"
	allocate     = "/v1beta1.DevicePlugin/Allocate"
	timeout      = 20 * time.Second
)

// answer is the one JSON line the client prints.
type answer struct {
	GrpcVersion string            `json:"grpc_version"`
	Devices     []string          `json:"devices"`
	Envs        map[string]string `json:"envs"`
	Authorities []string          `json:"authorities"`
}

// recorder keeps a copy of every byte the client writes on its connections.
type recorder struct {
	mu      sync.Mutex
	written bytes.Buffer
}

func (r *recorder) snapshot() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.written.Bytes())
}

type tappedConn struct {
	net.Conn
	rec *recorder
}

func (c tappedConn) Write(p []byte) (int, error) {
	c.rec.mu.Lock()
	c.rec.written.Write(p)
	c.rec.mu.Unlock()
	return c.Conn.Write(p)
}

// messages looks up the device plugin API's messages by their short names.
type messages struct {
	files *protoregistry.Files
}

func loadMessages() (messages, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(descriptorSet, &set); err != nil {
		return messages{}, fmt.Errorf("decode the embedded descriptor set: %w", err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return messages{}, fmt.Errorf("build the embedded descriptors: %w", err)
	}
	return messages{files}, nil
}

func (m messages) new(name string) *dynamicpb.Message {
	d, err := m.files.FindDescriptorByName(protoreflect.FullName("v1beta1." + name))
	if err != nil {
		panic(fmt.Sprintf("message v1beta1.%s: %v", name, err))
	}
	return dynamicpb.NewMessage(d.(protoreflect.MessageDescriptor))
}

func field(m protoreflect.Message, name string) protoreflect.FieldDescriptor {
	f := m.Descriptor().Fields().ByName(protoreflect.Name(name))
	if f == nil {
		panic(fmt.Sprintf("%s has no field %s", m.Descriptor().FullName(), name))
	}
	return f
}

// firstDevices opens ListAndWatch and reads its first answer. The stream stays open until ctx
// ends, as a kubelet keeps it: the plugin starts over on a new socket when a stream ends.
func firstDevices(ctx context.Context, conn *grpc.ClientConn, msgs messages) ([]string, error) {
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, listAndWatch)
	if err != nil {
		return nil, fmt.Errorf("ListAndWatch: %w", err)
	}
	if err := stream.SendMsg(msgs.new("Empty")); err != nil {
		return nil, fmt.Errorf("ListAndWatch: send: %w", err)
	}
	if err := stream.CloseSend(); err != nil {
		return nil, fmt.Errorf("ListAndWatch: close send: %w", err)
	}
	first := msgs.new("ListAndWatchResponse")
	if err := stream.RecvMsg(first); err != nil {
		return nil, fmt.Errorf("ListAndWatch: first answer: %w", err)
	}
	list := first.Get(field(first, "devices")).List()
	ids := make([]string, 0, list.Len())
	for i := 0; i < list.Len(); i++ {
		device := list.Get(i).Message()
		ids = append(ids, device.Get(field(device, "ID")).String())
	}
	return ids, nil
}

// allocateEnvs asks Allocate for one container with the given devices and returns its env.
func allocateEnvs(ctx context.Context, conn *grpc.ClientConn, msgs messages, ids []string) (map[string]string, error) {
	container := msgs.new("ContainerAllocateRequest")
	devices := container.Mutable(field(container, "devices_ids")).List()
	for _, id := range ids {
		devices.Append(protoreflect.ValueOfString(id))
	}
	request := msgs.new("AllocateRequest")
	request.Mutable(field(request, "container_requests")).List().Append(protoreflect.ValueOfMessage(container))
	response := msgs.new("AllocateResponse")
	if err := conn.Invoke(ctx, allocate, request, response); err != nil {
		return nil, fmt.Errorf("Allocate: %w", err)
	}
	responses := response.Get(field(response, "container_responses")).List()
	if responses.Len() != 1 {
		return nil, fmt.Errorf("Allocate: %d container responses for one container", responses.Len())
	}
	first := responses.Get(0).Message()
	envs := map[string]string{}
	first.Get(field(first, "envs")).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		envs[k.String()] = v.String()
		return true
	})
	return envs, nil
}

// authorities decodes the client's own HTTP/2 bytes (the connection preface, then frames) and
// returns the distinct :authority values of its header blocks, sorted.
func authorities(written []byte) ([]string, error) {
	written, ok := bytes.CutPrefix(written, []byte(http2.ClientPreface))
	if !ok {
		return nil, errors.New("the client did not start with the HTTP/2 connection preface")
	}
	framer := http2.NewFramer(io.Discard, bytes.NewReader(written))
	framer.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	seen := map[string]bool{}
	for {
		frame, err := framer.ReadFrame()
		// The copy may end inside a frame the client was still writing.
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("decode the client's frames: %w", err)
		}
		if headers, ok := frame.(*http2.MetaHeadersFrame); ok {
			seen[headers.PseudoValue("authority")] = true
		}
	}
	found := make([]string, 0, len(seen))
	for a := range seen {
		found = append(found, a)
	}
	sort.Strings(found)
	return found, nil
}

func run(socket string) (answer, error) {
	msgs, err := loadMessages()
	if err != nil {
		return answer{}, err
	}
	rec := &recorder{}
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", socket)
		if err != nil {
			return nil, err
		}
		return tappedConn{conn, rec}, nil
	}
	// The target as kubelets from 1.26 write it: grpc-go's own unix resolver chooses the
	// :authority; the dialer only keeps a copy of what is written.
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dial))
	if err != nil {
		return answer{}, fmt.Errorf("client for unix://%s: %w", socket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	watching, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	ids, err := firstDevices(watching, conn, msgs)
	if err != nil {
		return answer{}, err
	}
	if len(ids) == 0 {
		return answer{}, errors.New("ListAndWatch: no devices")
	}
	envs, err := allocateEnvs(ctx, conn, msgs, ids[:1])
	if err != nil {
		return answer{}, err
	}
	seen, err := authorities(rec.snapshot())
	if err != nil {
		return answer{}, err
	}
	return answer{GrpcVersion: grpc.Version, Devices: ids, Envs: envs, Authorities: seen}, nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: device-plugin-client SOCKET")
		os.Exit(2)
	}
	a, err := run(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "device-plugin-client (grpc-go %s): %v\n", grpc.Version, err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(a); err != nil {
		fmt.Fprintf(os.Stderr, "device-plugin-client: write the answer: %v\n", err)
		os.Exit(1)
	}
}
