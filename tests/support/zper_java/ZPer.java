package org.zper;

import java.util.Properties;

import org.zper.base.ZLogManager;

/**
 * Stands in for ZPER's broker (org.zper.ZPer) when ZPER's own tests run against pzq:
 * the broker is the pzq node, so start() only points ZPER's ZLogManager at a copy of
 * the node's archive folder (system property pzq.zper.base_dir), from which the tests
 * read the segments they expect the node's answers to match.
 */
public class ZPer
{
    public ZPer(Properties conf)
    {
    }

    public void start()
    {
        String baseDir = System.getProperty("pzq.zper.base_dir");
        if (baseDir == null)
            throw new IllegalStateException("set -Dpzq.zper.base_dir to the copy of the node's archive");
        ZLogManager.instance().config().set("base_dir", baseDir);
    }

    public void shutdown()
    {
        ZLogManager.instance().shutdown();
    }
}
