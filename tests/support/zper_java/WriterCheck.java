import java.nio.ByteBuffer;

import org.zeromq.ZMQ;
import org.zper.ZPUtils;

/**
 * ZPER's TestZPWriter (testSend over DEALER, testSendPush over PUSH) with the node in
 * another process: the test reads the offset of the ZLog in its own process, so here
 * the offset before and after comes from the node's reader (OFFSET -1, the end of the
 * last segment). The send is the test's: a ZPER identity for topic "test", mode 0, one
 * frame "hello"; the end must grow by data.length() + 2 (a short frame's header).
 *
 * Usage: WriterCheck WRITER_ENDPOINT READER_ENDPOINT DEALER|PUSH. Exit 0 when the
 * offset grew as the test expects, 1 otherwise (with the offsets seen).
 */
public class WriterCheck
{
    public static void main(String[] args) throws Exception
    {
        String writer = args[0];
        String reader = args[1];
        int kind = args[2].equals("PUSH") ? ZMQ.PUSH : ZMQ.DEALER;
        String topic = "test";
        String data = "hello";

        ZMQ.Context ctx = ZMQ.context(1);
        ZMQ.Socket offsets = ctx.socket(ZMQ.DEALER);
        offsets.setIdentity(ZPUtils.genTopicIdentity(topic, 0));
        offsets.setLinger(100);
        offsets.setReceiveTimeOut(10000);
        offsets.connect(reader);
        long before = end(offsets);

        ZMQ.Socket sock = ctx.socket(kind);
        sock.setIdentity(ZPUtils.genTopicIdentity(topic, 0));
        sock.setLinger(100);
        sock.connect(writer);
        if (!sock.send(data)) {
            System.out.println(args[2] + ": send failed");
            System.exit(1);
        }

        long expected = before + data.length() + 2;
        long now = before;
        long deadline = System.currentTimeMillis() + 10000;
        while (now != expected && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
            now = end(offsets);
        }
        System.out.println(args[2] + ": offset " + before + " -> " + now + ", expected " + expected);
        sock.close();
        offsets.close();
        ctx.term();
        System.exit(now == expected ? 0 : 1);
    }

    /** The end of the topic's last segment, as the node's reader answers OFFSET -1. */
    private static long end(ZMQ.Socket sock)
    {
        sock.sendMore("OFFSET");
        sock.send(ByteBuffer.allocate(8).putLong(-1).array());
        byte[] status = sock.recv();
        if (status == null)
            throw new IllegalStateException("no answer to OFFSET -1 in 10 s");
        if (status[0] != 100)
            throw new IllegalStateException("OFFSET -1 answered status " + status[0]);
        byte[] last = null;
        while (sock.hasReceiveMore())
            last = sock.recv();
        return ByteBuffer.wrap(last).getLong();
    }
}
