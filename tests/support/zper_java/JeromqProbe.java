import java.nio.ByteBuffer;

import org.zeromq.ZMQ;
import zmq.Msg;

/**
 * What of this jeromq decides how ZPER's clients fare, one line each:
 *
 * "zmtp 2" or "zmtp 3": the ZeroMQ version jeromq speaks for (3.x: ZMTP 2.0, no socket
 * type check, so a PUSH connects to a ROUTER as ZPER's TestZPWriter has it; 4.x, from
 * jeromq 0.4: ZMTP 3.0, which, as libzmq, refuses that pair).
 *
 * "slices keep bounds" or "slices read whole": whether a zmq.Msg made on a slice of a
 * buffer holds that slice alone. Up to jeromq 0.5.1 its data() is the whole backing
 * array; ZPER's MsgIterator hands out such slices, and its perf consumer then counts
 * each record as long as the whole reply, reads one reply and stops.
 */
public class JeromqProbe
{
    public static void main(String[] args)
    {
        System.out.println(ZMQ.getMajorVersion() < 4 ? "zmtp 2" : "zmtp 3");
        ByteBuffer whole = ByteBuffer.wrap(new byte[10]);
        whole.position(2);
        whole.limit(5);
        Msg msg = new Msg(whole.slice());
        System.out.println(msg.data().length == 3 ? "slices keep bounds" : "slices read whole");
    }
}
