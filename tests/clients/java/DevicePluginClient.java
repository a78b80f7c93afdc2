// A device plugin client on grpc-java (its Netty transport), not on our HTTP/2 stack.
//
// grpc-java names a channel built for a Unix socket address after the address itself, so it sends
// the socket's path as the HTTP/2 :authority, as kubelets before 1.26 and gRPC C-core do.
// Usage: java DevicePluginClient SOCKET
// Prints one JSON line: the :authority of every request it wrote to the socket, the devices of
// the first ListAndWatch answer, and the env of an Allocate for the first of them. Exits non-zero
// with the gRPC error otherwise.
//
// The stubs come from bins/device-plugin/src/api/deviceplugin_v1beta1.proto through protoc and its grpc-java
// plugin (scripts/install-deps.sh test builds this file under target/grpc-java).

import com.google.gson.Gson;
import io.grpc.Context;
import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.NettyChannelBuilder;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import io.netty.channel.ChannelException;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelOutboundHandlerAdapter;
import io.netty.channel.ChannelPromise;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.channel.socket.nio.NioSocketChannel;
import io.netty.channel.unix.DomainSocketAddress;
import io.netty.handler.codec.http2.DefaultHttp2FrameReader;
import io.netty.handler.codec.http2.Http2CodecUtil;
import io.netty.handler.codec.http2.Http2FrameAdapter;
import io.netty.handler.codec.http2.Http2Headers;
import java.io.File;
import java.io.IOException;
import java.net.SocketAddress;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentSkipListSet;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import org.newsclub.net.unix.AFUNIXSelectorProvider;
import org.newsclub.net.unix.AFUNIXSocketAddress;
import v1beta1.DevicePluginGrpc;
import v1beta1.DevicepluginV1Beta1.AllocateRequest;
import v1beta1.DevicepluginV1Beta1.AllocateResponse;
import v1beta1.DevicepluginV1Beta1.ContainerAllocateRequest;
import v1beta1.DevicepluginV1Beta1.Device;
import v1beta1.DevicepluginV1Beta1.Empty;
import v1beta1.DevicepluginV1Beta1.ListAndWatchResponse;

public final class DevicePluginClient {
    private static final long DEADLINE_SECONDS = 20;

    /** The :authority of every HEADERS frame written to the socket. */
    private static final Set<String> AUTHORITIES = new ConcurrentSkipListSet<>();

    /**
     * Netty's NIO socket channel on a junixsocket AF_UNIX channel. grpc-java's usual Unix socket
     * transport, EpollDomainSocketChannel, needs Netty's epoll JNI library, which Debian does not
     * build; everything above the socket (grpc-java's HTTP/2 codec, headers, framing) is the same.
     *
     * The socket is connected before Netty registers the channel: junixsocket 2.6's selector
     * reports a not yet connected socket as hung up and closes it, and Netty selects between
     * registering a channel and connecting it. So the channel is active from the start, and the
     * connect grpc-java asks for later only checks that it names the same socket.
     */
    static final class UnixSocketChannel extends NioSocketChannel {
        private final String path;

        UnixSocketChannel(String path) {
            super(connect(path));
            this.path = path;
            pipeline().addFirst(new AuthorityTap());
        }

        private static SocketChannel connect(String path) {
            try {
                return AFUNIXSelectorProvider.provider()
                        .openSocketChannel(AFUNIXSocketAddress.of(new File(path)));
            } catch (IOException e) {
                throw new ChannelException("connect to " + path, e);
            }
        }

        @Override
        protected boolean doConnect(SocketAddress remote, SocketAddress local) throws Exception {
            String asked = ((DomainSocketAddress) remote).path();
            if (!asked.equals(path)) {
                throw new IOException("connected to " + path + ", not " + asked);
            }
            return true;
        }
    }

    /**
     * Reads back the bytes grpc-java writes to the socket as HTTP/2 frames and records each
     * request's :authority: what went on the wire, not what the channel was configured with.
     * It sits first in the pipeline, so it sees the bytes just as the socket gets them.
     */
    static final class AuthorityTap extends ChannelOutboundHandlerAdapter {
        private final DefaultHttp2FrameReader reader = new DefaultHttp2FrameReader();
        private final ByteBuf pending = Unpooled.buffer();
        private int prefaceLeft = Http2CodecUtil.connectionPrefaceBuf().readableBytes();
        private final Http2FrameAdapter listener = new Http2FrameAdapter() {
            @Override
            public void onHeadersRead(ChannelHandlerContext ctx, int stream, Http2Headers headers,
                    int padding, boolean endStream) {
                if (headers.authority() != null) {
                    AUTHORITIES.add(headers.authority().toString());
                }
            }

            @Override
            public void onHeadersRead(ChannelHandlerContext ctx, int stream, Http2Headers headers,
                    int dependency, short weight, boolean exclusive, int padding, boolean endStream) {
                onHeadersRead(ctx, stream, headers, padding, endStream);
            }
        };

        @Override
        public void write(ChannelHandlerContext ctx, Object msg, ChannelPromise promise)
                throws Exception {
            if (msg instanceof ByteBuf) {
                ByteBuf bytes = (ByteBuf) msg;
                pending.writeBytes(bytes, bytes.readerIndex(), bytes.readableBytes());
                // The connection preface is not a frame.
                int skip = Math.min(prefaceLeft, pending.readableBytes());
                pending.skipBytes(skip);
                prefaceLeft -= skip;
                // Reads every complete frame and keeps a partial one for the next write.
                reader.readFrame(ctx, pending, listener);
                pending.discardReadBytes();
            }
            ctx.write(msg, promise);
        }
    }

    public static void main(String[] args) throws Exception {
        String socket = args[0];
        NioEventLoopGroup loop =
                new NioEventLoopGroup(1, (Executor) null, AFUNIXSelectorProvider.provider());
        // forAddress with a Unix socket address: grpc-java takes the channel's authority from the
        // address's toString(), the socket path.
        ManagedChannel channel = NettyChannelBuilder.forAddress(new DomainSocketAddress(socket))
                .channelFactory(() -> new UnixSocketChannel(socket))
                .eventLoopGroup(loop)
                .usePlaintext()
                .build();
        int code = 0;
        try {
            DevicePluginGrpc.DevicePluginBlockingStub stub = DevicePluginGrpc.newBlockingStub(channel);
            // ListAndWatch never ends on its own: take its first answer and keep the call open
            // until Allocate has answered. The plugin takes the end of a ListAndWatch stream for
            // the kubelet losing it and starts over on a new socket (bins/device-plugin/src/kubelet/
            // lifecycle.rs), so an Allocate sent after the cancel could find the old one gone.
            Context.CancellableContext watch = Context.current().withCancellation();
            ListAndWatchResponse first = watch.call(() -> stub
                    .withDeadlineAfter(DEADLINE_SECONDS, TimeUnit.SECONDS)
                    .listAndWatch(Empty.getDefaultInstance())
                    .next());
            List<String> ids = new ArrayList<>();
            for (Device d : first.getDevicesList()) {
                ids.add(d.getID());
            }
            AllocateRequest request = AllocateRequest.newBuilder()
                    .addContainerRequests(ContainerAllocateRequest.newBuilder()
                            .addAllDevicesIds(ids.subList(0, Math.min(1, ids.size()))))
                    .build();
            AllocateResponse answer = stub
                    .withDeadlineAfter(DEADLINE_SECONDS, TimeUnit.SECONDS)
                    .allocate(request);
            watch.cancel(null);
            Map<String, Object> out = new TreeMap<>();
            out.put("authorities", new TreeSet<>(AUTHORITIES));
            out.put("devices", ids);
            out.put("envs", new TreeMap<>(answer.getContainerResponses(0).getEnvsMap()));
            System.out.println(new Gson().toJson(out));
        } catch (StatusRuntimeException e) {
            System.err.println("gRPC error: " + e.getStatus() + "; authorities sent: " + AUTHORITIES);
            code = 1;
        } finally {
            channel.shutdownNow().awaitTermination(DEADLINE_SECONDS, TimeUnit.SECONDS);
            loop.shutdownGracefully(0, 0, TimeUnit.SECONDS);
        }
        System.exit(code);
    }
}
