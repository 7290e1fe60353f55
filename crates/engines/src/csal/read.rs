//! User reads (§4.3 "Read"): look the LBA up in the L2P (faulting its page in when needed)
//! and read the block from whichever member holds it; unmapped LBAs read as zeros. While the
//! read is outstanding its container counts it as a reader, so that a checkpoint does not free
//! a released chunk or zone (which could then be rewritten) under it.

use flashrig_blockdev::DevResult;

use super::format::UNMAPPED;
use super::Inner;

impl Inner {
    pub(crate) async fn read(&self, lba: u64, buf: &mut [u8]) -> DevResult<()> {
        let bs = self.bs();
        let blocks = (buf.len() / bs) as u64;
        self.c.user_reads.inc();
        self.c.user_read_blocks.add(blocks);
        let mut i = 0u64;
        while i < blocks {
            let l = lba + i;
            let g = &self.geo;
            let pba = self
                .with_entry(l, |st| {
                    let p = st.l2p.get(l).unwrap();
                    if p != UNMAPPED {
                        st.containers[g.container_of(p)].readers += 1;
                    }
                    p
                })
                .await?;
            if pba == UNMAPPED {
                buf[i as usize * bs..(i as usize + 1) * bs].fill(0);
                i += 1;
                continue;
            }
            // Extend the run while the next LBAs sit right behind on the same container.
            let c = g.container_of(pba);
            let mut n = 1u64;
            while i + n < blocks {
                let next = lba + i + n;
                let want = pba + n as u32;
                let got = {
                    let mut st = self.st.lock();
                    match st.l2p.get(next) {
                        Some(p) if p == want && g.container_of(p) == c => {
                            st.containers[c].readers += 1;
                            true
                        }
                        _ => false,
                    }
                };
                if !got {
                    break;
                }
                n += 1;
            }
            let (dev, at) = self.dev_of(pba);
            let r = dev.read(at, &mut buf[i as usize * bs..(i + n) as usize * bs], None).await;
            {
                let mut st = self.st.lock();
                st.containers[c].readers -= n as u32;
            }
            r?;
            i += n;
        }
        Ok(())
    }
}
